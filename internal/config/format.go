package config

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/setting"
)

// formatFields are a destination's fields of docs/protocol.md section 7:
// the format's name and headers, then the fields of every format of r.
func formatFields(r *formats.Registry) []string {
	out := []string{"format", "headers"}
	for _, k := range r.Kinds() {
		out = append(out, k.Fields...)
	}
	return out
}

// Format is what a destination's file says of its format (docs/protocol.md
// section 6): its name and headers, which are every format's, and the
// settings its own package read (internal/formats/<name>). Its secrets
// never print themselves.
type Format struct {
	// Name is the format; "" is the syncer format.
	Name string
	// Headers are sent with every request, literal or read from the
	// environment; nil for none.
	Headers map[string]Secret
	// HeaderEnvs names the variables headers are read from, by header.
	HeaderEnvs map[string]string
	// Settings are the format's own, as its Kind parsed them.
	Settings formats.Settings
}

// Spec is the format as internal/formats builds it.
func (f *Format) Spec() *formats.Spec {
	return &formats.Spec{Name: f.Name, Settings: f.Settings}
}

// Header is the headers as a request carries them.
func (f *Format) Header() http.Header {
	if len(f.Headers) == 0 {
		return nil
	}
	h := http.Header{}
	for k, v := range f.Headers {
		h.Set(k, v.Reveal())
	}
	return h
}

// format reads the format fields of a destination into d.Format: a known
// format, then its own fields, read and checked by its package.
func (p *parser) format(d *Destination, f map[string]*yaml.Node, path string, n *yaml.Node) error {
	fm := &d.Format
	var err error
	if fm.Name, err = str(f, "format", path); err != nil {
		return err
	}
	kind, ok := p.formats.Lookup(fm.Name)
	if !ok {
		return &Error{Path: join(path, "format"), Line: line(f, "format", n), Msg: p.formats.UnknownError(fm.Name).Error()}
	}
	for _, k := range p.formats.Kinds() {
		for _, field := range k.Fields {
			if v, ok := f[field]; ok && !isNull(v) && k.Name != kind.Name {
				return &Error{Path: join(path, field), Line: v.Line, Msg: "is only for format " + k.Name}
			}
		}
	}
	if err := p.headers(fm, f, path); err != nil {
		return err
	}
	fields := &yamlFields{p: p, f: f, path: path, entry: n}
	if fm.Settings, err = kind.Parse(fields); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			return err
		}
		return fields.Errorf("format", err.Error())
	}
	return nil
}

// yamlFields are a destination's fields as a format reads them
// (setting.Fields): every error names the field's path and line.
type yamlFields struct {
	p     *parser
	f     map[string]*yaml.Node
	path  string
	entry *yaml.Node
}

var _ setting.Fields = (*yamlFields)(nil)

func (y *yamlFields) String(field string) (string, error) { return str(y.f, field, y.path) }

func (y *yamlFields) Bool(field string) (bool, bool, error) {
	v, ok := y.f[field]
	if !ok || isNull(v) {
		return false, false, nil
	}
	var b bool
	if v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		return false, true, &Error{Path: join(y.path, field), Line: v.Line, Msg: "must be true or false"}
	}
	return b, true, nil
}

func (y *yamlFields) Mapping(field string, known []string) (setting.Fields, error) {
	v, ok := y.f[field]
	if !ok || isNull(v) {
		return nil, nil
	}
	mpath := join(y.path, field)
	if v.Kind != yaml.MappingNode {
		return nil, &Error{Path: mpath, Line: v.Line, Msg: "must be a mapping with " + strings.Join(known, ", ")}
	}
	mf, err := y.p.mapping(v, mpath, known)
	if err != nil {
		return nil, err
	}
	return &yamlFields{p: y.p, f: mf, path: mpath, entry: v}, nil
}

// Secret is read as every secret is (FIELD_env or FIELD_file), so that
// config check sees it too.
func (y *yamlFields) Secret(field string) (setting.Secret, error) {
	ref, v, err := y.p.secret(y.f, y.entry, y.path, field)
	if err != nil {
		return setting.Secret{}, err
	}
	return setting.Secret{Field: field, Env: ref.Env, File: ref.File, Value: v.Reveal()}, nil
}

// Errorf is at the line of field's first segment ("request" of
// "request.body"), else of the entry.
func (y *yamlFields) Errorf(field, msg string) error {
	return &Error{Path: join(y.path, field), Line: line(y.f, strings.SplitN(field, ".", 2)[0], y.entry), Msg: msg}
}

// headers reads `headers`: a mapping of names to a literal or {env: VAR}.
func (p *parser) headers(fm *Format, f map[string]*yaml.Node, path string) error {
	v, ok := f["headers"]
	if !ok || isNull(v) {
		return nil
	}
	hpath := join(path, "headers")
	if v.Kind != yaml.MappingNode {
		return &Error{Path: hpath, Line: v.Line, Msg: "must be a mapping of header names to a value or {env: VAR}"}
	}
	fm.Headers, fm.HeaderEnvs = map[string]Secret{}, map[string]string{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, hv := v.Content[i], v.Content[i+1]
		name := http.CanonicalHeaderKey(k.Value)
		field := join(hpath, k.Value)
		if k.Value == "" || strings.ContainsAny(k.Value, " \t\r\n:") {
			return &Error{Path: field, Line: k.Line, Msg: "is not a header name"}
		}
		switch name {
		case "Content-Type", "Idempotency-Key", "Content-Length", "Host", "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature":
			return &Error{Path: field, Line: k.Line, Msg: "is set by syncer and cannot be configured"}
		}
		if _, dup := fm.Headers[name]; dup {
			return &Error{Path: field, Line: k.Line, Msg: "given twice"}
		}
		var value string
		switch hv.Kind {
		case yaml.ScalarNode:
			if hv.Decode(&value) != nil {
				return &Error{Path: field, Line: hv.Line, Msg: "must be a string or {env: VAR}"}
			}
		case yaml.MappingNode:
			ef, err := p.mapping(hv, field, []string{"env"})
			if err != nil {
				return err
			}
			env, err := str(ef, "env", field)
			if err != nil {
				return err
			}
			if !envName.MatchString(env) {
				return &Error{Path: join(field, "env"), Line: hv.Line, Msg: "must be the name of an environment variable (letters, digits and _)"}
			}
			fm.HeaderEnvs[name] = env
			if p.getenv != nil {
				if value = strings.TrimSpace(p.getenv(env)); value == "" {
					return &Error{Path: join(field, "env"), Line: hv.Line, Msg: fmt.Sprintf("environment variable %s is not set or empty", env)}
				}
			}
		default:
			return &Error{Path: field, Line: hv.Line, Msg: "must be a string or {env: VAR}"}
		}
		if strings.ContainsAny(value, "\r\n") {
			return &Error{Path: field, Line: hv.Line, Msg: "must not contain line breaks"}
		}
		fm.Headers[name] = Secret(value)
	}
	return nil
}
