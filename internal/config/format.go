package config

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/custom"
)

// formatFields are a destination's fields of docs/protocol.md section 7:
// the format's name and headers, then the fields of every format, from the
// table of formats.
var formatFields = func() []string {
	out := []string{"format", "headers"}
	for _, k := range formats.Kinds() {
		out = append(out, k.Fields...)
	}
	return out
}()

// Format is what a destination's file says of its format (docs/protocol.md
// section 6). Its secrets never print themselves.
type Format struct {
	// Name is the format; "" is the syncer format.
	Name string
	// Headers are sent with every request, literal or read from the
	// environment; nil for none.
	Headers map[string]Secret
	// HeaderEnvs names the variables headers are read from, by header.
	HeaderEnvs map[string]string
	// SigningSecretEnv and SigningSecretFile say where the signing secret
	// is read from; SigningSecret is it (empty when Load was given no
	// getenv).
	SigningSecretEnv, SigningSecretFile string
	SigningSecret                       Secret
	// EventSource and EventTypePrefix are cloudevents' attributes.
	EventSource, EventTypePrefix string
	// Custom is the custom format's programs.
	Custom custom.Config
}

// Spec is the format as internal/formats builds it.
func (f *Format) Spec() *formats.Spec {
	return &formats.Spec{Name: f.Name, SigningSecret: f.SigningSecret.Reveal(),
		EventSource: f.EventSource, EventTypePrefix: f.EventTypePrefix, Custom: f.Custom}
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

// format reads the format fields of a destination into d.Format and checks
// that they can work: a known format, its secret of the right form, its
// programs compiling.
func (p *parser) format(d *Destination, f map[string]*yaml.Node, path string, n *yaml.Node) error {
	fm := &d.Format
	var err error
	if fm.Name, err = str(f, "format", path); err != nil {
		return err
	}
	if !formats.Known(fm.Name) {
		return &Error{Path: join(path, "format"), Line: line(f, "format", n),
			Msg: fmt.Sprintf("unknown format %q (known: %s)", fm.Name, strings.Join(formats.Names(false), ", "))}
	}
	kind, _ := formats.Lookup(fm.Name)
	for _, k := range formats.Kinds() {
		for _, field := range k.Fields {
			if v, ok := f[field]; ok && !isNull(v) && k.Name != kind.Name {
				return &Error{Path: join(path, field), Line: v.Line, Msg: "is only for format " + k.Name}
			}
		}
	}
	if err := p.headers(fm, f, path); err != nil {
		return err
	}
	for _, s := range []struct {
		field string
		to    *string
	}{{"event_source", &fm.EventSource}, {"event_type_prefix", &fm.EventTypePrefix}} {
		if *s.to, err = str(f, s.field, path); err != nil {
			return err
		}
	}
	// The signing secret is read as every secret is (signing_secret_env or
	// signing_secret_file), so that config check sees it too.
	ref, secret, err := p.secret(f, n, path, "signing_secret")
	if err != nil {
		return err
	}
	fm.SigningSecretEnv, fm.SigningSecretFile, fm.SigningSecret = ref.Env, ref.File, secret
	if kind.Secret == "signing_secret" && !ref.Given() {
		return &Error{Path: join(path, "signing_secret_env"), Line: n.Line, Msg: "required by format " + kind.Name + " (or signing_secret_file)"}
	}
	if fm.Name == custom.Name {
		if err := p.custom(fm, f, path, n); err != nil {
			return err
		}
	}
	// Build the format once, to refuse what cannot work now rather than at
	// the first batch (a secret of the wrong form, a program that does not
	// compile). Without a secret read (no getenv) the secret is not checked.
	spec := fm.Spec()
	if kind.Secret != "" && spec.SigningSecret == "" {
		return nil
	}
	if _, err := formats.New(spec, ""); err != nil {
		var fe *formats.FieldError
		field := "format"
		if errors.As(err, &fe) {
			field = fe.Field
			if field == "signing_secret_env" && fm.SigningSecretFile != "" {
				field = "signing_secret_file"
			}
			err = fe.Err
		}
		msg := err.Error()
		msg = strings.TrimPrefix(msg, field+": ")
		return &Error{Path: join(path, field), Line: line(f, strings.SplitN(field, ".", 2)[0], n), Msg: msg}
	}
	return nil
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

// custom reads request, deletes and response.
func (p *parser) custom(fm *Format, f map[string]*yaml.Node, path string, n *yaml.Node) error {
	reqFields := []string{"method", "path", "body", "content_type", "per_item"}
	read := func(field string, fields []string) (*custom.Request, error) {
		v, ok := f[field]
		if !ok || isNull(v) {
			return nil, nil
		}
		rpath := join(path, field)
		if v.Kind != yaml.MappingNode {
			return nil, &Error{Path: rpath, Line: v.Line, Msg: "must be a mapping with " + strings.Join(fields, ", ")}
		}
		rf, err := p.mapping(v, rpath, fields)
		if err != nil {
			return nil, err
		}
		r := &custom.Request{}
		for _, s := range []struct {
			field string
			to    *string
		}{{"method", &r.Method}, {"path", &r.Path}, {"body", &r.Body}, {"content_type", &r.ContentType}} {
			if *s.to, err = str(rf, s.field, rpath); err != nil {
				return nil, err
			}
		}
		if pv, ok := rf["per_item"]; ok && !isNull(pv) {
			if pv.ShortTag() != "!!bool" || pv.Decode(&r.PerItem) != nil {
				return nil, &Error{Path: join(rpath, "per_item"), Line: pv.Line, Msg: "must be true or false"}
			}
		}
		return r, nil
	}
	req, err := read("request", reqFields)
	if err != nil {
		return err
	}
	if req != nil {
		fm.Custom.Request = *req
	}
	if fm.Custom.Deletes, err = read("deletes", []string{"method", "path", "body", "per_item"}); err != nil {
		return err
	}
	if v, ok := f["program_timeout"]; ok && !isNull(v) {
		d, err := time.ParseDuration(v.Value)
		if err != nil || d <= 0 || d > time.Minute {
			return &Error{Path: join(path, "program_timeout"), Line: v.Line, Msg: "must be a duration above 0 and at most 1m, such as 500ms or 2s"}
		}
		fm.Custom.ProgramTimeout = d
	}
	if v, ok := f["response"]; ok && !isNull(v) {
		rpath := join(path, "response")
		if v.Kind != yaml.MappingNode {
			return &Error{Path: rpath, Line: v.Line, Msg: "must be a mapping with accepted, rejected, refused, retry"}
		}
		rf, err := p.mapping(v, rpath, []string{"accepted", "rejected", "refused", "retry"})
		if err != nil {
			return err
		}
		if fm.Custom.Refused, err = str(rf, "refused", rpath); err != nil {
			return err
		}
		if fm.Custom.Retry, err = str(rf, "retry", rpath); err != nil {
			return err
		}
		if fm.Custom.Accepted, err = str(rf, "accepted", rpath); err != nil {
			return err
		}
		if fm.Custom.Rejected, err = str(rf, "rejected", rpath); err != nil {
			return err
		}
	}
	return nil
}
