package credentials

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/syncer-dev/syncer/internal/redact"
)

// Bearer sends "Authorization: Bearer <token>", the token read again when
// its file changes.
type Bearer struct{ Token *Secret }

// Authorization returns the header's value.
func (b *Bearer) Authorization(context.Context) (string, error) {
	return "Bearer " + b.Token.Value(), nil
}

// Secrets are the values to scrub from whatever the third party echoes.
func (b *Bearer) Secrets() []string { return []string{b.Token.Value()} }

// Basic sends HTTP basic auth (RFC 7617).
type Basic struct{ Username, Password *Secret }

// Authorization returns the header's value.
func (b *Basic) Authorization(context.Context) (string, error) {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(b.Username.Value()+":"+b.Password.Value())), nil
}

// Secrets are the values to scrub from whatever the third party echoes:
// the password, and the header's base64 of user and password
// (redact.Basic), which a third party that quotes the request's headers
// echoes as it was sent.
func (b *Basic) Secrets() []string {
	pw := b.Password.Value()
	return append([]string{pw}, redact.Basic(b.Username.Value(), pw)...)
}

// OAuth2Config is an OAuth2 client-credentials grant (RFC 6749 section 4.4).
type OAuth2Config struct {
	// TokenURL is the token endpoint. Required.
	TokenURL string
	// ClientID and ClientSecret are sent in the HTTP basic header. Required.
	ClientID, ClientSecret *Secret
	// Scopes are asked for; none when empty.
	Scopes []string
	// Params are extra form parameters (audience, resource).
	Params map[string]string
	// HTTPClient reaches the token endpoint: the destination's TLS
	// settings. Redirects are not followed. Defaults to a client with
	// TokenTimeoutDefault.
	HTTPClient *http.Client
}

// TokenTimeoutDefault bounds one request to a token endpoint.
const TokenTimeoutDefault = 10 * time.Second

// OAuth2 fetches a token from the endpoint, shares it among every request
// of its destination, fetches a new one shortly before it expires and
// after a 401 (Refresh), never per request.
type OAuth2 struct {
	cfg     OAuth2Config
	client  *http.Client
	fetches atomic.Int64
	cache   TokenCache
}

// NewOAuth2 returns the grant of cfg; nothing is fetched before the first
// request.
func NewOAuth2(cfg OAuth2Config) (*OAuth2, error) {
	if cfg.TokenURL == "" {
		return nil, errors.New("credentials: OAuth2Config.TokenURL is required")
	}
	if cfg.ClientID == nil || cfg.ClientSecret == nil {
		return nil, errors.New("credentials: OAuth2Config.ClientID and ClientSecret are required")
	}
	c := cfg.HTTPClient
	if c == nil {
		c = &http.Client{Timeout: TokenTimeoutDefault}
	} else {
		cc := *c
		c = &cc
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &OAuth2{cfg: cfg, client: c}, nil
}

// Fetches counts the tokens asked of the endpoint.
func (o *OAuth2) Fetches() int64 { return o.fetches.Load() }

// Authorization returns "Bearer <token>", fetching a token first when
// there is none or it is about to expire. Concurrent requests wait for one
// fetch.
func (o *OAuth2) Authorization(ctx context.Context) (string, error) {
	return o.cache.Authorization(ctx, o.fetch)
}

// fetch asks the endpoint for a token.
func (o *OAuth2) fetch(ctx context.Context) (*oauth2.Token, error) {
	cc := clientcredentials.Config{
		ClientID:     o.cfg.ClientID.Value(),
		ClientSecret: o.cfg.ClientSecret.Value(),
		TokenURL:     o.cfg.TokenURL,
		Scopes:       o.cfg.Scopes,
		AuthStyle:    oauth2.AuthStyleInHeader,
	}
	if len(o.cfg.Params) > 0 {
		cc.EndpointParams = map[string][]string{}
		for k, v := range o.cfg.Params {
			cc.EndpointParams[k] = []string{v}
		}
	}
	o.fetches.Add(1)
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, o.client))
	if err != nil {
		return nil, o.tokenError(err, append([]string{cc.ClientSecret}, redact.Basic(cc.ClientID, cc.ClientSecret)...)...)
	}
	return tok, nil
}

// Refresh drops the token header carried, after the third party answered
// 401 to it: the next request fetches a new one.
func (o *OAuth2) Refresh(header string) { o.cache.Refresh(header) }

// Secrets are the values to scrub from whatever the third party echoes:
// the client secret, the base64 of the Basic header it goes to the token
// endpoint in (a token endpoint or a proxy may quote it), and the token in
// use.
func (o *OAuth2) Secrets() []string {
	secret := o.cfg.ClientSecret.Value()
	out := append([]string{secret}, redact.Basic(o.cfg.ClientID.Value(), secret)...)
	if tok := o.cache.Token(); tok != "" {
		out = append(out, tok)
	}
	return out
}

// TokenError is a token endpoint's failure, in its own words (the OAuth2
// error code and description, or the transport's), never a secret. It
// names the endpoint, so that a refusal of the client credentials is not
// taken for the destination's refusal of a request.
type TokenError struct {
	// Endpoint is the token endpoint's URL without its user, query or
	// fragment: where the refusal came from, with nothing secret.
	Endpoint string
	// Status is the endpoint's HTTP status; 0 when it did not answer.
	Status int
	// Text says what failed.
	Text string
	// Refused names what a refusal (TokenRefused) refused, as status and
	// logs say it: RefusedClient or RefusedRefreshToken. Defaults to
	// RefusedClient.
	Refused string
}

// What a token endpoint refused (TokenError.Refused).
const (
	// RefusedClient is the client id and secret (invalid_client).
	RefusedClient = "the client credentials"
	// RefusedRefreshToken is a refresh_token grant's token
	// (invalid_grant): spent, expired or revoked.
	RefusedRefreshToken = "the refresh token"
)

// RefusedCredential names what the endpoint refused: RefusedClient or
// RefusedRefreshToken.
func (e *TokenError) RefusedCredential() string {
	if e.Refused == "" {
		return RefusedClient
	}
	return e.Refused
}

func (e *TokenError) Error() string { return "token endpoint " + e.Endpoint + ": " + e.Text }

// ScrubText rewrites the endpoint's words with scrub: a client that knows
// more secrets than the grant (its headers') removes them from the error
// itself, which callers reach with errors.As.
func (e *TokenError) ScrubText(scrub func(string) string) { e.Text = scrub(e.Text) }

// EndpointStatus is the token endpoint's HTTP status; 0 when it did not
// answer.
func (e *TokenError) EndpointStatus() int { return e.Status }

// TokenEndpoint is the endpoint's URL without secrets (Endpoint).
func (e *TokenError) TokenEndpoint() string { return e.Endpoint }

// endpointText is a token URL as logs and status may show it: scheme,
// host and path, without the user, the query or the fragment, any of
// which may carry a secret.
func endpointText(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "[unparseable URL]"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// TokenRefused reports an endpoint that refused the client or its grant
// (400, 401 or 403: invalid_client, unauthorized_client, invalid_scope,
// invalid_grant): the credentials are wrong, and retrying will not mend
// them; RefusedCredential says which.
// Anything else (5xx, no answer) is transient.
func (e *TokenError) TokenRefused() bool {
	return e.Status == http.StatusBadRequest || e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

func (o *OAuth2) tokenError(err error, secrets ...string) *TokenError {
	te := &TokenError{Endpoint: endpointText(o.cfg.TokenURL)}
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re):
		if re.Response != nil {
			te.Status = re.Response.StatusCode
		}
		parts := []string{fmt.Sprintf("answered %d", te.Status)}
		if re.ErrorCode != "" {
			parts = append(parts, re.ErrorCode)
		}
		if re.ErrorDescription != "" {
			parts = append(parts, re.ErrorDescription)
		}
		if re.ErrorCode == "" && len(re.Body) > 0 {
			parts = append(parts, string(re.Body))
		}
		te.Text = strings.Join(parts, ": ")
	default:
		te.Text = err.Error()
	}
	// A transport error quotes the URL whole, query included.
	te.Text = strings.ReplaceAll(te.Text, o.cfg.TokenURL, te.Endpoint)
	// The endpoint may quote the request: its Basic header, its form (the
	// secret URL-encoded), in JSON.
	te.Text = redact.Scrub(te.Text, secrets...)
	if len(te.Text) > 512 {
		te.Text = te.Text[:512] + "…"
	}
	return te
}
