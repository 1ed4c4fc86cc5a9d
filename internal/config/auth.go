package config

import (
	"crypto/tls"
	"fmt"
	"net/url"

	"go.yaml.in/yaml/v3"
)

// The values of Auth.Type.
const (
	AuthBearer = "bearer"
	AuthBasic  = "basic"
	AuthOAuth2 = "oauth2_client_credentials"
	// AuthTenants is an auth mapping without a type, on a destination
	// with tenants: the token endpoint (token_url, with the application's
	// client_id and client_secret) of the credentials each tenant's
	// connection row gives (a refresh token, a client id and secret).
	AuthTenants = ""
)

// Auth is a destination's auth mapping (docs/protocol.md, section 9).
// Every secret comes from <field>_env or <field>_file; a file is read
// again by the daemon when it changes.
type Auth struct {
	// Type is AuthBearer, AuthBasic or AuthOAuth2.
	Type string
	// Token is the bearer token (bearer).
	Token SecretRef
	// Username and Password are basic auth's.
	Username, Password SecretRef
	// TokenURL, ClientID, ClientSecret, Scopes and Params are the OAuth2
	// client-credentials grant's: the client id and secret go in the HTTP
	// basic header of the token request, Params as extra form parameters
	// (audience, resource).
	TokenURL               string
	ClientID, ClientSecret SecretRef
	Scopes                 []string
	Params                 map[string]string
}

// TLS is a destination's tls mapping.
type TLS struct {
	// CAFile holds the PEM certificates of the CAs that sign the server's
	// certificate, added to the system's roots, or the only roots with
	// CAOnly (system_roots: false).
	CAFile string
	CAOnly bool
	// CertFile and KeyFile are a client certificate and its key, PEM.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry.
	ServerName string
	// MinVersion is tls.VersionTLS12 or tls.VersionTLS13; 0 when not set
	// (1.2).
	MinVersion uint16
}

var authFields = []string{"type", "token_env", "token_file", "username_env", "username_file", "password_env", "password_file",
	"token_url", "client_id_env", "client_id_file", "client_secret_env", "client_secret_file", "scopes", "params"}

var tlsFields = []string{"ca_file", "system_roots", "cert_file", "key_file", "server_name", "min_version"}

// auth reads a destination's auth mapping, refusing what cannot work
// with one line naming the field.
func (p *parser) auth(d *Destination, f map[string]*yaml.Node, path string) error {
	n, ok := f["auth"]
	if !ok || isNull(n) {
		return nil
	}
	path = join(path, "auth")
	if n.Kind != yaml.MappingNode {
		return &Error{Path: path, Line: n.Line, Msg: "must be a mapping with type: bearer, basic or oauth2_client_credentials"}
	}
	af, err := p.mapping(n, path, authFields)
	if err != nil {
		return err
	}
	if d.TokenEnv != "" || d.TokenFile != "" {
		return &Error{Path: path, Line: n.Line, Msg: "and token_env or token_file are exclusive: put the token in auth"}
	}
	a := &Auth{}
	if a.Type, err = str(af, "type", path); err != nil {
		return err
	}
	if a.Type == AuthTenants && d.Tenants == nil {
		return &Error{Path: join(path, "type"), Line: n.Line, Msg: "required: bearer, basic or oauth2_client_credentials (only a destination with tenants may leave it out)"}
	}
	need := func(field string) (SecretRef, error) {
		ref, _, err := p.secret(af, n, path, field)
		if err != nil {
			return ref, err
		}
		if !ref.Given() {
			return ref, &Error{Path: join(path, field+"_env"), Line: n.Line, Msg: fmt.Sprintf("required with type %s: give %s_env or %s_file", a.Type, field, field)}
		}
		return ref, nil
	}
	allowed := map[string]bool{"type": true}
	switch a.Type {
	case AuthBearer:
		if a.Token, err = need("token"); err != nil {
			return err
		}
		allowed["token_env"], allowed["token_file"] = true, true
	case AuthBasic:
		if a.Username, err = need("username"); err != nil {
			return err
		}
		if a.Password, err = need("password"); err != nil {
			return err
		}
		for _, k := range []string{"username_env", "username_file", "password_env", "password_file"} {
			allowed[k] = true
		}
	case AuthOAuth2, AuthTenants:
		if a.TokenURL, err = str(af, "token_url", path); err != nil {
			return err
		}
		if u, err := url.Parse(a.TokenURL); a.TokenURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return &Error{Path: join(path, "token_url"), Line: line(af, "token_url", n), Msg: "required: the token endpoint's http or https URL, without credentials"}
		}
		if a.Type == AuthTenants {
			// The application's own client, optional: a tenant's row
			// may give its own.
			if a.ClientID, _, err = p.secret(af, n, path, "client_id"); err != nil {
				return err
			}
			if a.ClientSecret, _, err = p.secret(af, n, path, "client_secret"); err != nil {
				return err
			}
		} else {
			if a.ClientID, err = need("client_id"); err != nil {
				return err
			}
			if a.ClientSecret, err = need("client_secret"); err != nil {
				return err
			}
		}
		if v, ok := af["scopes"]; ok && !isNull(v) {
			if err := v.Decode(&a.Scopes); err != nil {
				return &Error{Path: join(path, "scopes"), Line: v.Line, Msg: "must be a list of scopes"}
			}
		}
		if v, ok := af["params"]; ok && !isNull(v) {
			if err := v.Decode(&a.Params); err != nil {
				return &Error{Path: join(path, "params"), Line: v.Line, Msg: "must be a mapping of form parameters to values"}
			}
		}
		for _, k := range []string{"token_url", "client_id_env", "client_id_file", "client_secret_env", "client_secret_file", "scopes", "params"} {
			allowed[k] = true
		}
	default:
		return &Error{Path: join(path, "type"), Line: line(af, "type", n), Msg: "must be bearer, basic or oauth2_client_credentials"}
	}
	for k, v := range af {
		if !allowed[k] {
			if a.Type == AuthTenants {
				return &Error{Path: join(path, k), Line: v.Line, Msg: "does not go with an auth without type (a tenants destination's token endpoint: token_url, client_id, client_secret, scopes, params)"}
			}
			return &Error{Path: join(path, k), Line: v.Line, Msg: "does not go with type " + a.Type}
		}
	}
	d.Auth = a
	return nil
}

// tls reads a destination's tls mapping; the files are read and checked
// by the daemon and by config check.
func (p *parser) tls(d *Destination, f map[string]*yaml.Node, path string) error {
	n, ok := f["tls"]
	if !ok || isNull(n) {
		return nil
	}
	path = join(path, "tls")
	if n.Kind != yaml.MappingNode {
		return &Error{Path: path, Line: n.Line, Msg: "must be a mapping of ca_file, system_roots, cert_file, key_file, server_name, min_version"}
	}
	tf, err := p.mapping(n, path, tlsFields)
	if err != nil {
		return err
	}
	t := &TLS{}
	for field, dst := range map[string]*string{"ca_file": &t.CAFile, "cert_file": &t.CertFile, "key_file": &t.KeyFile, "server_name": &t.ServerName} {
		if *dst, err = str(tf, field, path); err != nil {
			return err
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return &Error{Path: join(path, "key_file"), Line: n.Line, Msg: "cert_file and key_file go together: give both or neither"}
	}
	if v, ok := tf["system_roots"]; ok && !isNull(v) {
		var b bool
		if err := v.Decode(&b); err != nil {
			return &Error{Path: join(path, "system_roots"), Line: v.Line, Msg: "must be true or false"}
		}
		if !b && t.CAFile == "" {
			return &Error{Path: join(path, "system_roots"), Line: v.Line, Msg: "false needs ca_file: no root would be left"}
		}
		t.CAOnly = !b
	}
	mv, err := str(tf, "min_version", path)
	if err != nil {
		return err
	}
	switch mv {
	case "":
	case "1.2":
		t.MinVersion = tls.VersionTLS12
	case "1.3":
		t.MinVersion = tls.VersionTLS13
	default:
		return &Error{Path: join(path, "min_version"), Line: line(tf, "min_version", n), Msg: `must be "1.2" or "1.3"`}
	}
	d.TLS = t
	return nil
}
