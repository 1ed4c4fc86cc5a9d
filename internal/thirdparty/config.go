package thirdparty

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// TimeoutDefault is the per-request timeout when Config.Timeout is zero.
const TimeoutDefault = 10 * time.Second

// IdleConnsDefault is Config.IdleConns's default: the default number of
// requests in flight.
const IdleConnsDefault = 16

// Config configures a Client.
type Config struct {
	// URL is the third party's base URL, http or https; requests go to
	// URL + the request's path (the syncer format's is "/v1/batches").
	// Required.
	URL string
	// Token is sent as "Authorization: Bearer <Token>" when set. It never
	// appears in an error. Defaults to no Authorization header.
	Token string
	// Timeout bounds one request, from sending to reading the whole answer.
	// Defaults to TimeoutDefault (10s).
	Timeout time.Duration
	// HTTPClient sends the requests. Its redirect policy is never used:
	// the Client works on a shallow copy that follows no redirect, so a
	// batch and its token go to the configured origin only. Defaults to a
	// client whose Transport keeps up to 16 idle connections per host alive,
	// so concurrent workers reuse connections instead of paying a handshake
	// per batch.
	HTTPClient *http.Client
	// IdleConns is how many idle connections to the third party are kept
	// for reuse: set it to the requests in flight at once, or every answer
	// beyond it closes a connection the next request dials again. Ignored
	// with HTTPClient. Defaults to IdleConnsDefault.
	IdleConns int
	// Headers are sent with every request, before the request's own
	// Content-Type, Idempotency-Key and Authorization (which win). Values
	// are never logged. Defaults to none.
	Headers http.Header
	// Now is the clock that resolves Retry-After HTTP dates and
	// X-RateLimit-Reset Unix times. Defaults to time.Now.
	Now func() time.Time
	// Auth gives every request's Authorization header, in place of Token:
	// a rotating bearer token, basic auth, an OAuth2 token. Defaults to
	// none (Token, if set).
	Auth Authorizer
	// TLS is the TLS configuration of the requests (a private CA, a
	// client certificate). Ignored with HTTPClient. Defaults to Go's.
	TLS *tls.Config
}

// Authorizer gives the Authorization header of a request. Its errors that
// have a TokenRefused() bool method saying true refuse the credentials
// (as a 401 does); any other is transient.
type Authorizer interface {
	Authorization(ctx context.Context) (string, error)
	// Secrets are the values to scrub from whatever the third party
	// echoes back (the token, the password).
	Secrets() []string
}

// Refresher is an Authorizer whose credential may be renewed: after a 401
// to a request that carried header, the request is sent once more with
// the header it gives then, and only a second 401 refuses the credentials.
type Refresher interface {
	Refresh(header string)
}

func (c *Config) validate() (*url.URL, error) {
	if c.URL == "" {
		return nil, errors.New("thirdparty: config: URL is required")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// url.Parse's error quotes the URL, which may hold a password.
		return nil, errors.New("thirdparty: config: URL is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("thirdparty: config: URL scheme must be http or https, not %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("thirdparty: config: URL has no host")
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("thirdparty: config: Timeout must not be negative, got %s", c.Timeout)
	}
	if strings.ContainsAny(c.Token, "\r\n") {
		return nil, errors.New("thirdparty: config: Token must not contain line breaks")
	}
	for k, vs := range c.Headers {
		for _, v := range vs {
			if strings.ContainsAny(k+v, "\r\n") {
				return nil, fmt.Errorf("thirdparty: config: header %s must not contain line breaks", k)
			}
		}
	}
	return u, nil
}
