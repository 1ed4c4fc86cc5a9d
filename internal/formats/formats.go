// Package formats builds a destination's format (docs/protocol.md section  7)
// from what its configuration says: one package per format under
// internal/formats, behind the one interface the delivery path uses
// (delivery.Format), as Alertmanager keeps one package per integration
// behind its Notifier. Keys, recording, limits, the breaker, backoff,
// splits and refusals are not a format's: they live once, in
// internal/delivery and internal/thirdparty, and hold for every format.
package formats

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/cloudevents"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/elasticsearch"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/formats/syncer"
)

// Format is delivery.Format, declared by its consumer: how a batch becomes
// requests and how an answer to one is read.
type Format = delivery.Format

var (
	_ Format             = syncer.Format{}
	_ delivery.Canonical = syncer.Format{}
	_ Format             = elasticsearch.Format{}
	_ Format             = (*cloudevents.Format)(nil)
	_ Format             = (*standardwebhooks.Format)(nil)
	_ Format             = (*custom.Format)(nil)
)

// Kind is one format in the table every reader of format names uses
// (config, the command line, this package): a new format is a package and
// one entry here.
type Kind struct {
	// Name is the format's name in configuration.
	Name string
	// Fields are the destination fields only this format takes; the
	// configuration refuses them with another format.
	Fields []string
	// Secret is the secret field the format requires ("signing_secret":
	// its _env or _file), or "" for none.
	Secret string
	// Flags is set when the SYNCER_THIRDPARTY_* settings alone can
	// configure it (the resources export without a file).
	Flags bool
	build func(spec *Spec, installation string) (Format, error)
}

// table is every format, the default first.
var table = []Kind{
	{Name: syncer.Name, Flags: true, build: func(*Spec, string) (Format, error) { return syncer.Format{}, nil }},
	{Name: standardwebhooks.Name, Flags: true, Secret: "signing_secret",
		Fields: []string{"signing_secret_env", "signing_secret_file"}, build: newStandardWebhooks},
	{Name: cloudevents.Name, Flags: true, Fields: []string{"event_source", "event_type_prefix"}, build: newCloudEvents},
	{Name: elasticsearch.Name, Flags: true, build: func(*Spec, string) (Format, error) { return elasticsearch.Format{}, nil }},
	{Name: custom.Name, Fields: []string{"request", "deletes", "response", "program_timeout"}, build: newCustom},
}

// Kinds returns the table of formats, the default first.
func Kinds() []Kind { return slices.Clone(table) }

// Lookup returns the format named name ("" is the default).
func Lookup(name string) (Kind, bool) {
	if name == "" {
		return table[0], true
	}
	for _, k := range table {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Names are the formats a destination may name, the default first; with
// flagsOnly, those the SYNCER_THIRDPARTY_* settings alone can configure.
func Names(flagsOnly bool) []string {
	var out []string
	for _, k := range table {
		if k.Flags || !flagsOnly {
			out = append(out, k.Name)
		}
	}
	return out
}

// Spec is what a destination's configuration says of its format.
type Spec struct {
	// Name is the format. Defaults to "syncer".
	Name string
	// SigningSecret signs standard-webhooks requests: "whsec_" and base64.
	// Required by standard-webhooks. Never logged. Defaults to "".
	SigningSecret string
	// SigningSecretFunc, when set, gives the signing secrets at each
	// request in place of SigningSecret: a file read again when it
	// changes. Defaults to nil.
	SigningSecretFunc func() string
	// EventSource and EventTypePrefix are cloudevents' attributes.
	// Default to the cloudevents package's defaults.
	EventSource, EventTypePrefix string
	// Custom is the custom format's programs. Defaults to the zero value.
	Custom custom.Config
}

// FieldError is a format setting that cannot work, naming its field as
// the configuration writes it ("format", "signing_secret_env",
// "request.body"...). It never quotes a secret.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	if msg := e.Err.Error(); strings.HasPrefix(msg, e.Field+":") {
		return msg
	}
	return e.Field + ": " + e.Err.Error()
}
func (e *FieldError) Unwrap() error { return e.Err }

// New builds the format spec names. installation is the installation's
// id (cloudevents' default source). Every error is a *FieldError.
func New(spec *Spec, installation string) (Format, error) {
	k, ok := Lookup(spec.Name)
	if !ok {
		return nil, &FieldError{Field: "format", Err: fmt.Errorf("unknown format %q (known: %s)", spec.Name, strings.Join(Names(false), ", "))}
	}
	return k.build(spec, installation)
}

func newCloudEvents(spec *Spec, installation string) (Format, error) {
	f, err := cloudevents.New(&cloudevents.Config{Installation: cmp.Or(installation, "-"),
		EventSource: spec.EventSource, EventTypePrefix: spec.EventTypePrefix})
	if err != nil {
		return nil, &FieldError{Field: "event_source", Err: err}
	}
	return f, nil
}

func newStandardWebhooks(spec *Spec, _ string) (Format, error) {
	if spec.SigningSecretFunc != nil {
		f, err := standardwebhooks.NewRotating(spec.SigningSecretFunc)
		if err != nil {
			return nil, &FieldError{Field: "signing_secret_file", Err: err}
		}
		return f, nil
	}
	if spec.SigningSecret == "" {
		return nil, &FieldError{Field: "signing_secret_env", Err: fmt.Errorf("required by %s (or signing_secret_file)", standardwebhooks.Name)}
	}
	f, err := standardwebhooks.New(spec.SigningSecret)
	if err != nil {
		return nil, &FieldError{Field: "signing_secret_env", Err: err}
	}
	return f, nil
}

func newCustom(spec *Spec, _ string) (Format, error) {
	f, err := custom.New(&spec.Custom)
	if err != nil {
		return nil, &FieldError{Field: fieldOf(err), Err: err}
	}
	return f, nil
}

// Known reports whether name is a format.
func Known(name string) bool { _, ok := Lookup(name); return ok }

// fieldOf is the field a custom error starts with ("request.body: ...").
func fieldOf(err error) string {
	if field, _, ok := strings.Cut(err.Error(), ":"); ok && !strings.Contains(field, " ") {
		return field
	}
	return "request"
}
