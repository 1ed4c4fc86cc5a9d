package credentials

import (
	"context"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// TokenCache is the OAuth2 access token one grant shares among every
// request it authorizes (a destination's client credentials, OAuth2; a
// tenant's refresh token, in internal/tenants): fetched when there is none
// or it is about to expire (TokenFresh), dropped after a 401 (Refresh),
// never per request. Concurrent requests wait for one fetch. The zero
// value is ready to use.
type TokenCache struct {
	mu      sync.Mutex
	tok     *oauth2.Token
	fetched time.Time
}

// Authorization returns "Bearer <token>", calling fetch first when there
// is no token or it is about to expire. An error of fetch drops the token
// held and is returned as it is.
func (c *TokenCache) Authorization(ctx context.Context, fetch func(context.Context) (*oauth2.Token, error)) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if TokenFresh(c.tok, c.fetched, now) {
		return "Bearer " + c.tok.AccessToken, nil
	}
	tok, err := fetch(ctx)
	if err != nil {
		c.tok = nil
		return "", err
	}
	c.tok, c.fetched = tok, now
	return "Bearer " + tok.AccessToken, nil
}

// Refresh drops the token header carried, after the third party answered
// 401 to it: the next request fetches a new one. A header of an older
// token changes nothing.
func (c *TokenCache) Refresh(header string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok != nil && header == "Bearer "+c.tok.AccessToken {
		c.tok = nil
	}
}

// Token is the access token held, for scrubbing; "" when none.
func (c *TokenCache) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok == nil {
		return ""
	}
	return c.tok.AccessToken
}

// renewMargin is how long before its expiry a token is replaced: a fifth of
// its life, at most 10 s (oauth2's own margin, which alone would fetch a
// token lasting under 10 s at every request).
func renewMargin(life time.Duration) time.Duration { return min(10*time.Second, life/5) }

// TokenFresh reports whether tok, fetched at fetched, may still be sent at
// now: it has no expiry, or its expiry is further than renewMargin. It is
// TokenCache's rule, the one of every OAuth2 access token syncer holds.
func TokenFresh(tok *oauth2.Token, fetched, now time.Time) bool {
	return tok != nil && (tok.Expiry.IsZero() || now.Before(tok.Expiry.Add(-renewMargin(tok.Expiry.Sub(fetched)))))
}
