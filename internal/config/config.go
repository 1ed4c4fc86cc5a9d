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
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/sources"
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

// Secret is a token. It prints as "[redacted]" whatever the verb, so a
// Destination can be logged or printed without leaking it.
type Secret string

// String hides the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString hides the secret from %#v.
func (s Secret) GoString() string { return `config.Secret("` + s.String() + `")` }

// LogValue hides the secret from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText hides the secret from encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the token, for the Authorization header only.
func (s Secret) Reveal() string { return string(s) }

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
	p := &parser{getenv: getenv}
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
	// secrets are the secrets the file names, in its order.
	secrets []SecretUse
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// mapping returns n's fields, refusing duplicates and fields not in known.
func (p *parser) mapping(n *yaml.Node, path string, known []string) (map[string]*yaml.Node, error) {
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		if _, dup := out[name]; dup {
			return nil, &Error{Path: join(path, name), Line: k.Line, Msg: "given twice"}
		}
		if !slices.Contains(known, name) {
			return nil, &Error{Path: path, Line: k.Line, Msg: fmt.Sprintf("unknown field %q (known: %s)", name, strings.Join(known, ", "))}
		}
		out[name] = v
	}
	return out, nil
}

// join appends a field to a path: "destinations.crm" + "url" with a dot,
// "sources[0] (orders)" + "key" with a colon.
func join(path, field string) string {
	switch {
	case path == "":
		return field
	case strings.HasPrefix(path, "destinations."):
		return path + "." + field
	default:
		return path + ": " + field
	}
}

var destinationFields = append([]string{"url", "token_env", "token_file", "auth", "tls", "rate_limit", "rate_burst", "max_in_flight"}, formatFields...)

func (p *parser) destinations(n *yaml.Node) ([]*Destination, error) {
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Path: "destinations", Line: n.Line, Msg: "must be a mapping of names to destinations"}
	}
	if len(n.Content) == 0 {
		return nil, &Error{Path: "destinations", Line: n.Line, Msg: "required: at least one destination"}
	}
	var out []*Destination
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "destinations." + k.Value
		if seen[k.Value] {
			return nil, &Error{Path: path, Line: k.Line, Msg: "given twice"}
		}
		seen[k.Value] = true
		if msg := checkName(k.Value); msg != "" {
			return nil, &Error{Path: "destinations", Line: k.Line, Msg: msg}
		}
		if k.Value == DefaultDestination {
			return nil, &Error{Path: path, Line: k.Line, Msg: fmt.Sprintf(
				"%q is the destination the SYNCER_THIRDPARTY_* settings configure (a source may name it); give this one another name", k.Value)}
		}
		d, err := p.destination(k.Value, v, path)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (p *parser) destination(name string, n *yaml.Node, path string) (*Destination, error) {
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Path: path, Line: n.Line, Msg: "must be a mapping with url and optional token_env or token_file, rate_limit, rate_burst, max_in_flight"}
	}
	f, err := p.mapping(n, path, destinationFields)
	if err != nil {
		return nil, err
	}
	d := &Destination{Name: name, Line: n.Line}
	if d.URL, err = str(f, "url", path); err != nil {
		return nil, err
	}
	if err := checkURL(d.URL); err != "" {
		return nil, &Error{Path: join(path, "url"), Line: line(f, "url", n), Msg: err}
	}
	var ref SecretRef
	if ref, d.Token, err = p.secret(f, n, path, "token"); err != nil {
		return nil, err
	}
	d.TokenEnv, d.TokenFile = ref.Env, ref.File
	if v, ok := f["rate_limit"]; ok && !isNull(v) {
		var r float64
		if err := v.Decode(&r); err != nil || r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, &Error{Path: join(path, "rate_limit"), Line: v.Line, Msg: "must be a number of requests a second, 0 or more (0 means no limit)"}
		}
		d.RateLimit = &r
	}
	if d.RateBurst, err = positiveInt(f, "rate_burst", path); err != nil {
		return nil, err
	}
	if d.MaxInFlight, err = positiveInt(f, "max_in_flight", path); err != nil {
		return nil, err
	}
	if err := p.format(d, f, path, n); err != nil {
		return nil, err
	}
	if err := p.auth(d, f, path); err != nil {
		return nil, err
	}
	if err := p.tls(d, f, path); err != nil {
		return nil, err
	}
	return d, nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkURL never quotes the URL: it may hold a secret.
func checkURL(raw string) string {
	if raw == "" {
		return "required"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "must be an http or https URL"
	case u.User != nil:
		return "must not hold credentials: put the token in the variable token_env names"
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "must not have a query or a fragment: batches go to {url}/v1/batches"
	}
	return ""
}

// keyLine is the line of key in mapping n, else of n: a field given with
// nothing under it (its entries indented too little) is reported where it
// is written, not at the top of the file.
func keyLine(n *yaml.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

func mappingValue(n *yaml.Node, key string) (*yaml.Node, bool) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1], true
		}
	}
	return nil, false
}

// line is the line of field f, else of its entry.
func line(f map[string]*yaml.Node, field string, entry *yaml.Node) int {
	if v, ok := f[field]; ok {
		return v.Line
	}
	return entry.Line
}

func str(f map[string]*yaml.Node, field, path string) (string, error) {
	v, ok := f[field]
	if !ok || isNull(v) {
		return "", nil
	}
	var s string
	if v.Kind != yaml.ScalarNode || v.Decode(&s) != nil {
		return "", &Error{Path: join(path, field), Line: v.Line, Msg: "must be a string"}
	}
	return s, nil
}

// positiveInt decodes an optional integer field that must be at least 1: 0
// when absent.
func positiveInt(f map[string]*yaml.Node, field, path string) (int, error) {
	v, ok := f[field]
	if !ok || isNull(v) {
		return 0, nil
	}
	var n int
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil || n < 1 {
		return 0, &Error{Path: join(path, field), Line: v.Line, Msg: "must be a whole number, 1 or more"}
	}
	return n, nil
}

// checkName accepts names made for logs, metrics labels and the command
// line: letters, digits and _ - . $, 1 to MaxName bytes.
func checkName(name string) string {
	if name == "" {
		return "must not be empty"
	}
	if len(name) > MaxName {
		return fmt.Sprintf("%q is longer than %d bytes", name, MaxName)
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("_-.$", r) {
			return fmt.Sprintf("%q may only hold letters, digits and _ - . $", name)
		}
	}
	return ""
}

// checkIdentifier accepts any name PostgreSQL can hold: the name is quoted
// wherever syncer uses it, so it is taken exactly as written (Orders is not
// orders).
func checkIdentifier(id string) string {
	switch {
	case id == "":
		return "must not be empty"
	case len(id) > MaxIdentifier:
		return fmt.Sprintf("is longer than %d bytes, which no PostgreSQL name can be", MaxIdentifier)
	case strings.ContainsRune(id, 0):
		return "must not hold a NUL byte"
	}
	return ""
}
