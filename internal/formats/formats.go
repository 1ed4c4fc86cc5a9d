// Package formats builds a destination's format (docs/protocol.md section  7)
// from what its configuration says: one package per format under
// internal/formats, behind the one interface the delivery path uses
// (delivery.Format), as Alertmanager keeps one package per integration
// behind its Notifier. Keys, recording, limits, the breaker, backoff,
// splits and refusals are not a format's: they live once, in
// internal/delivery and internal/thirdparty, and hold for every format.
//
// Each format owns its settings: its package declares a setting.Kind (its
// fields, their parsing into its own typed settings, and how they build
// it), and the table below lists every Kind once. The configuration file,
// the command line, `config check` and the daemon read this table; none
// spells a format's name or field again.
package formats

import (
	"fmt"
	"slices"
	"strings"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/cloudevents"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/elasticsearch"
	"github.com/syncer-dev/syncer/internal/formats/setting"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/formats/syncer"
)

// Format is delivery.Format, declared by its consumer: how a batch becomes
// requests and how an answer to one is read.
type Format = delivery.Format

// Kind is one format in the table (setting.Kind).
type Kind = setting.Kind

// Settings are one format's typed settings (setting.Settings).
type Settings = setting.Settings

// Secret is where a format's secret comes from (setting.Secret).
type Secret = setting.Secret

// Fields are a destination's fields as a format reads them
// (setting.Fields).
type Fields = setting.Fields

// Env is what building a format may use beyond its settings (setting.Env).
type Env = setting.Env

// FieldError is a format setting that cannot work, naming its field
// (setting.FieldError).
type FieldError = setting.FieldError

var (
	_ Format             = syncer.Format{}
	_ delivery.Canonical = syncer.Format{}
	_ Format             = elasticsearch.Format{}
	_ Format             = (*cloudevents.Format)(nil)
	_ Format             = (*standardwebhooks.Format)(nil)
	_ Format             = (*custom.Format)(nil)
)

// table is every format, the default first: a new format is a package
// and one line here.
var table = []Kind{
	syncer.Kind,
	standardwebhooks.Kind,
	cloudevents.Kind,
	elasticsearch.Kind,
	custom.Kind,
}

// Registry is a table of formats, the default first. The zero value is
// not usable; Default is the product's table.
type Registry struct {
	kinds []Kind
}

var defaultRegistry = &Registry{kinds: table}

// Default returns the table of every format syncer ships.
func Default() *Registry { return defaultRegistry }

// With returns a registry of r's formats and kinds (a test's format).
func (r *Registry) With(kinds ...Kind) *Registry {
	return &Registry{kinds: append(slices.Clone(r.kinds), kinds...)}
}

// Kinds returns the table, the default first.
func (r *Registry) Kinds() []Kind { return slices.Clone(r.kinds) }

// Lookup returns the format named name ("" is the default).
func (r *Registry) Lookup(name string) (Kind, bool) {
	if name == "" {
		return r.kinds[0], true
	}
	for _, k := range r.kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Names are the formats a destination may name, the default first; with
// flagsOnly, those the SYNCER_THIRDPARTY_* settings alone can configure.
func (r *Registry) Names(flagsOnly bool) []string {
	var out []string
	for _, k := range r.kinds {
		if k.Flags || !flagsOnly {
			out = append(out, k.Name)
		}
	}
	return out
}

// UnknownError is the error of a format name not in r.
func (r *Registry) UnknownError(name string) error {
	return fmt.Errorf("unknown format %q (known: %s)", name, strings.Join(r.Names(false), ", "))
}

// Kinds returns the default table of formats, the default first.
func Kinds() []Kind { return Default().Kinds() }

// Lookup returns the default table's format named name ("" is the default).
func Lookup(name string) (Kind, bool) { return Default().Lookup(name) }

// Names are Default().Names.
func Names(flagsOnly bool) []string { return Default().Names(flagsOnly) }

// Known reports whether name is a format of the default table.
func Known(name string) bool { _, ok := Lookup(name); return ok }

// Spec is a destination's format: its name and its settings, as its
// package parsed them.
type Spec struct {
	// Name is the format. Defaults to "syncer".
	Name string
	// Settings are the format's own, of the type its Kind parses. Defaults
	// to nil: the format's defaults (its Parse of no field).
	Settings Settings
}

// New builds the format spec names with no environment but installation
// (cloudevents' default source). Every error is a *FieldError.
func New(spec *Spec, installation string) (Format, error) {
	return Build(spec, &setting.Env{Installation: installation})
}

// Build builds the format spec names in env. Every error is a *FieldError.
func Build(spec *Spec, env *setting.Env) (Format, error) {
	s := spec.Settings
	if s == nil {
		k, ok := Lookup(spec.Name)
		if !ok {
			return nil, &FieldError{Field: "format", Err: Default().UnknownError(spec.Name)}
		}
		var err error
		if s, err = k.Parse(noFields{}); err != nil {
			return nil, &FieldError{Field: "format", Err: err}
		}
	}
	return s.Build(env)
}

// noFields are a destination that gives its format no field.
type noFields struct{}

func (noFields) String(string) (string, error)                    { return "", nil }
func (noFields) Bool(string) (bool, bool, error)                  { return false, false, nil }
func (noFields) Mapping(string, []string) (setting.Fields, error) { return nil, nil }
func (noFields) Secret(string) (setting.Secret, error)            { return setting.Secret{}, nil }
func (noFields) Errorf(field, msg string) error {
	return &FieldError{Field: field, Err: fmt.Errorf("%s", msg)}
}
