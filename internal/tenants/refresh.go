package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/redact"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// refreshGrant is a tenant's OAuth2 refresh_token grant (RFC 6749 section
// 6): an access token asked of the token endpoint with the tenant's
// refresh token, shared by the tenant's requests, asked again shortly
// before it expires and after a 401 (Refresh). A token endpoint that
// rotates the refresh token gives a new one with the access token: it is
// used from then on, and handed to store (on_refresh); the old one no
// longer works at the endpoint.
type refreshGrant struct {
	conf     oauth2.Config
	client   *http.Client
	endpoint string // the token URL without secrets, for errors
	// store keeps a rotated refresh token (on_refresh); nil keeps it in
	// memory only.
	store  func(ctx context.Context, refresh string) error
	logger *slog.Logger

	mu       sync.Mutex
	refresh  string // the refresh token in use
	previous string // the one it replaced: a row still giving it is not a change
	tok      *oauth2.Token
	fetched  time.Time
}

var (
	_ thirdparty.Authorizer = (*refreshGrant)(nil)
	_ thirdparty.Refresher  = (*refreshGrant)(nil)
)

// renewMargin is how long before its expiry a token is replaced, as
// credentials.OAuth2 does: a fifth of its life, at most 10 s.
func renewMargin(life time.Duration) time.Duration { return min(10*time.Second, life/5) }

// Authorization returns "Bearer <token>", asking the endpoint first when
// there is no token or it is about to expire.
func (g *refreshGrant) Authorization(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.tok != nil && (g.tok.Expiry.IsZero() || now.Before(g.tok.Expiry.Add(-renewMargin(g.tok.Expiry.Sub(g.fetched))))) {
		return "Bearer " + g.tok.AccessToken, nil
	}
	used := g.refresh
	tok, err := g.conf.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, g.client), &oauth2.Token{RefreshToken: used}).Token()
	if err != nil {
		g.tok = nil
		return "", g.tokenError(err)
	}
	g.tok, g.fetched = tok, now
	if tok.RefreshToken != "" && tok.RefreshToken != used {
		g.previous, g.refresh = used, tok.RefreshToken
		if g.store != nil {
			// The endpoint no longer takes the old token: the new one is
			// stored even when the request that asked is cancelled.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
			err := g.store(sctx, tok.RefreshToken)
			cancel()
			if err != nil {
				g.logger.WarnContext(ctx, "tenants: the token endpoint rotated the tenant's refresh token and on_refresh failed to store it; it is kept in memory only, and the tenant's connection must be renewed if this process stops",
					slog.String("error", err.Error()))
			} else {
				g.logger.DebugContext(ctx, "tenants: the token endpoint rotated the tenant's refresh token; on_refresh stored it")
			}
		}
	}
	return "Bearer " + tok.AccessToken, nil
}

// storeTimeout bounds one run of on_refresh.
const storeTimeout = 10 * time.Second

// Refresh drops the token header carried after a 401: the next request
// asks the endpoint again.
func (g *refreshGrant) Refresh(header string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tok != nil && header == "Bearer "+g.tok.AccessToken {
		g.tok = nil
	}
}

// Secrets are the values to scrub from whatever the third party echoes:
// the refresh tokens, the client secret and the base64 of the Basic header
// it goes to the token endpoint in (redact.Basic), the access token.
func (g *refreshGrant) Secrets() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := append([]string{g.refresh, g.previous, g.conf.ClientSecret}, redact.Basic(g.conf.ClientID, g.conf.ClientSecret)...)
	if g.tok != nil {
		out = append(out, g.tok.AccessToken)
	}
	return out
}

// knows reports whether refresh is the token in use or the one it
// replaced: a row that gives either has not changed its connection.
func (g *refreshGrant) knows(refresh string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return refresh == g.refresh || (g.previous != "" && refresh == g.previous)
}

// tokenError is the endpoint's failure in its own words, secrets
// scrubbed: a refusal (400 invalid_grant, 401, 403) refuses the tenant's
// credentials; anything else is transient.
func (g *refreshGrant) tokenError(err error) error {
	te := &credentials.TokenError{Endpoint: g.endpoint}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
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
		te.Text = strings.Join(parts, ": ")
	} else {
		te.Text = strings.ReplaceAll(err.Error(), g.conf.Endpoint.TokenURL, g.endpoint)
	}
	for _, s := range []string{g.refresh, g.previous, g.conf.ClientSecret} {
		if len(s) >= 4 {
			te.Text = strings.ReplaceAll(te.Text, s, "[redacted]")
		}
	}
	if len(te.Text) > 512 {
		te.Text = te.Text[:512] + "…"
	}
	return te
}

// endpointText is a token URL as errors may show it: scheme, host and
// path.
func endpointText(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "[unparseable URL]"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// oauth2Config is the refresh grant's client: its id and secret in the
// HTTP basic header, as credentials.OAuth2 sends them, or in the form
// when there is no client secret.
func oauth2Config(id, secret, tokenURL string, scopes []string) oauth2.Config {
	return oauth2.Config{ClientID: id, ClientSecret: secret, Scopes: scopes,
		Endpoint: oauth2.Endpoint{TokenURL: tokenURL, AuthStyle: authStyle(secret)}}
}

func authStyle(secret string) oauth2.AuthStyle {
	if secret == "" {
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleInHeader
}
