package config

import (
	"fmt"
	"math"
	"net/url"

	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/formats"
)

// destinationFields are a destination's fields: its own, then its
// format's, from the registry.
func (p *parser) destinationFields() []string {
	own := []string{"url", "token_env", "token_file", "auth", "tls", "rate_limit", "rate_burst", "max_in_flight", "tenants", "verify_every", "verify_heal"}
	return append(append(own, formatFields(p.formats)...), formats.VerifyField)
}

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
	f, err := p.mapping(n, path, p.destinationFields())
	if err != nil {
		return nil, err
	}
	d := &Destination{Name: name, Line: n.Line}
	if d.Tenants, err = p.tenants(f, path); err != nil {
		return nil, err
	}
	if d.URL, err = str(f, "url", path); err != nil {
		return nil, err
	}
	// With tenants, each tenant's row may give its own URL.
	if err := checkURL(d.URL); err != "" && (d.Tenants == nil || d.URL != "") {
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
	if err := p.verifyFields(d, f, path); err != nil {
		return nil, err
	}
	if err := p.format(d, f, path, n); err != nil {
		return nil, err
	}
	// The verify block is compiled as the custom format compiles its
	// programs, with the destination's program_timeout when it has one.
	if d.Verify, err = formats.ParseVerify(&yamlFields{p: p, f: f, path: path, entry: n}, d.Format.Settings); err != nil {
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
