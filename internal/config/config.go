// Package config reads the file named by SYNCER_CONFIG / --config: the
// destinations (third-party APIs) and the sources (the application's own
// tables) that syncer exports to them. Its shape is docs/protocol.md's Sources;
// docs/sources.md describes every field.
//
// Guarantees:
//   - A file is either wholly valid or refused with one *Error, whose text is
//     one line naming the entry and the field ("sources[1] (orders): key:
//     required (line 12)", "destinations.crm.url: must be an http or https
//     URL"), so the command line can print it and exit 2.
//   - Unknown fields are refused: a misspelt optional field never silently
//     falls back to its default.
//   - A token is read only from the environment variable or the file the
//     configuration names (token_env, token_file), once, and is held as a Secret, which never prints itself; no error quotes a token
//     or a URL (a URL may hold one).
//   - Names are unique: a source is named by its table (schema-qualified when
//     the file qualifies it) unless it has a name, and two sources never share
//     one, since the name keys its triggers, its change log and its lock.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// MaxIdentifier is the longest PostgreSQL identifier, in bytes
// (NAMEDATALEN - 1): a longer table or column name cannot exist.
const MaxIdentifier = 63

// DefaultDestination is the destination the SYNCER_THIRDPARTY_* settings
// build, resources' own: in the one list of destinations beside the
// file's, so a source may name it, and the file may not define another of
// that name.
const DefaultDestination = "default"

// MaxName is the longest source or destination name, in bytes.
const MaxName = 63

// Config is a parsed, valid configuration file.
type Config struct {
	// Path is the file it was read from.
	Path string
	// Destinations in the order of the file.
	Destinations []*Destination
	// Sources in the order of the file.
	Sources []*Source
	// Secrets are every secret the file names (tokens, signing secrets),
	// in its order, whether or not they were read.
	Secrets []SecretUse
}

// Destination returns the destination named name, or nil.
func (c *Config) Destination(name string) *Destination {
	for _, d := range c.Destinations {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Source returns the source named name, or nil.
func (c *Config) Source(name string) *Source {
	for _, s := range c.Sources {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Destination is one third-party API.
type Destination struct {
	// Name is its key in the file's destinations mapping.
	Name string
	// URL is the API's base URL: batches go to URL + "/v1/batches".
	URL string
	// TokenEnv names the environment variable that holds the bearer token;
	// empty when the file names none.
	TokenEnv string
	// TokenFile is the file that holds the bearer token (a mounted
	// secret), read once by Load; empty when the file names none. At most
	// one of TokenEnv and TokenFile is set.
	TokenFile string
	// Token is the bearer token read from TokenEnv or TokenFile: empty
	// without one, or when Load was given no getenv.
	Token Secret
	// RateLimit is the most requests a second, 0 meaning no limit; nil when
	// the file does not say. Defaults to the run's --rate-limit.
	RateLimit *float64
	// RateBurst is the rate limit's burst; 0 when the file does not say.
	// Defaults to the run's --rate-burst.
	RateBurst int
	// MaxInFlight is the most requests unanswered at once; 0 when the file
	// does not say. Defaults to the run's --max-in-flight.
	MaxInFlight int
	// Format is how batches become requests and answers are read
	// (docs/protocol.md, section 6). Defaults to the syncer format.
	Format Format
	// Auth is how requests authenticate, when the file has an auth
	// mapping; nil otherwise (TokenEnv or TokenFile then stand, if set).
	Auth *Auth
	// TLS is the destination's TLS settings; nil for Go's defaults.
	TLS *TLS
	// Tenants is the destination's tenants block (docs/protocol.md
	// section 10): each tenant's URL and credentials read from the
	// application's own table. nil without one: every tenant of a source
	// with a tenant column goes to URL with the destination's credentials.
	Tenants *tenants.Settings
	// Verify is how `syncer verify` reads the destination back: its verify
	// block (docs/protocol.md, "Verify and heal"), checked by compiling
	// it; nil without one: the format's own read API, if it has one.
	Verify formats.ReadSettings
	// VerifyEvery is how often the daemons verify every source of the
	// destination in the background (docs/protocol.md, section 11).
	// Defaults to 0: only `syncer verify` and "Verify now".
	VerifyEvery time.Duration
	// VerifyHeal makes background verification heal what drifted.
	// Defaults to false: drift is reported only.
	VerifyHeal bool
	// Line is where the destination starts in the file.
	Line int
}

// Limits are a destination's request limits, as the run's flags give them.
type Limits struct {
	RateLimit   float64
	RateBurst   int
	MaxInFlight int
}

// Limits returns the destination's limits, each taken from def where the
// file does not set it.
func (d *Destination) Limits(def Limits) Limits {
	l := Limits{
		RateLimit:   def.RateLimit,
		RateBurst:   cmp.Or(d.RateBurst, def.RateBurst),
		MaxInFlight: cmp.Or(d.MaxInFlight, def.MaxInFlight),
	}
	if d.RateLimit != nil {
		l.RateLimit = *d.RateLimit
	}
	return l
}

// LogValue leaves the token and the URL (which may hold credentials or a
// query) out of logs.
func (d *Destination) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", d.Name), slog.String("token_env", d.TokenEnv), slog.String("token_file", d.TokenFile))
}

// Source is one application table to export: the sources package's own
// settings (the table, key, columns, destination, snapshot, changed_at and
// row filter, read from the file into them) and what the daemon and the
// messages need besides.
type Source struct {
	sources.Spec
	// BatchSize is the most items a batch holds; 0 when the file does not
	// say. Defaults to the run's --batch-size.
	BatchSize int
	// Line is where the source starts in the file.
	Line int
}

// Error is a configuration error: the file is missing, unreadable, not
// YAML, or a field is wrong. Its text is one line.
type Error struct {
	// Path names the entry and field: "sources[1] (orders): key",
	// "destinations.crm.url", "sources"; empty for the file as a whole.
	Path string
	// Line is the line of the file, 0 when unknown.
	Line int
	// Msg says what is wrong.
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// IsConfigError reports whether err is, or wraps, a configuration error.
func IsConfigError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Load reads and validates the file at path. getenv looks up the token
// variables the destinations name (os.Getenv in production); with a nil
// getenv no token is read, neither from a variable nor from a file, for
// commands that need none (`syncer migrate`).
// Every failure is an *Error.
func Load(path string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		msg := "cannot read the file"
		switch {
		case errors.Is(err, os.ErrNotExist):
			msg = "no such file"
		case errors.Is(err, os.ErrPermission):
			msg = "permission denied"
		}
		return nil, &Error{Msg: msg}
	}
	cfg, err := Parse(b, getenv)
	if err != nil {
		return nil, err
	}
	cfg.Path = path
	return cfg, nil
}

// Parse validates a configuration file's contents; see Load.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	return ParseFormats(data, getenv, formats.Default())
}

// ParseFormats is Parse with the formats of reg (a test's format beside
// syncer's own).
func ParseFormats(data []byte, getenv func(string) string, reg *formats.Registry) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	// Unknown fields are refused below, entry by entry, so that the error
	// can name the entry; KnownFields keeps the decoder strict as well.
	dec.KnownFields(true)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Msg: "the file is empty"}
		}
		return nil, syntaxError(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{Line: extra.Line, Msg: "more than one YAML document"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Line: root.Line, Msg: "must be a mapping with destinations and sources"}
	}
	p := &parser{getenv: getenv, formats: reg}
	fields, err := p.mapping(root, "", []string{"destinations", "sources"})
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	dn, ok := fields["destinations"]
	if !ok || isNull(dn) {
		return nil, &Error{Path: "destinations", Line: keyLine(root, "destinations"), Msg: "required: at least one destination"}
	}
	if cfg.Destinations, err = p.destinations(dn); err != nil {
		return nil, err
	}
	sn, ok := fields["sources"]
	if !ok || isNull(sn) {
		return nil, &Error{Path: "sources", Line: keyLine(root, "sources"), Msg: "required: at least one source"}
	}
	if cfg.Sources, err = p.sources(sn, cfg); err != nil {
		return nil, err
	}
	cfg.Secrets = p.secrets
	return cfg, nil
}

type parser struct {
	getenv func(string) string
	// formats are the formats a destination may name.
	formats *formats.Registry
	// secrets are the secrets the file names, in its order.
	secrets []SecretUse
}
