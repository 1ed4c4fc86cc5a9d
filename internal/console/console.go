// Package console is syncer's web console, served by `syncer run` at
// /console when SYNCER_CONSOLE_TOKEN is set (docs/protocol.md section 8): an
// overview of every destination and source, a page per source (its
// failures, retries and replays) and per destination (its last hour, pause
// and resume, probe).
//
// What it guarantees:
//
//   - Nothing without the token: a browser signs in through a form (a
//     session cookie, HttpOnly, SameSite=Strict, Secure over TLS), a
//     script sends Authorization: Bearer. Anything else gets 401 and the
//     sign-in form, no data. The token is compared in constant time, and
//     is never logged, shown or put in a URL.
//   - Guessing costs only the guesser: failed tokens are limited per
//     client address, Bearer and form together (an address past its
//     limit gets 429 and Retry-After, even with the right token, until its
//     wait ends); another address is never limited by them, and the table
//     of addresses is bounded.
//   - Every change is a POST, refused (403) from another origin
//     (net/http's CrossOriginProtection) or without the session's proof; a
//     GET changes nothing.
//   - It reads what `syncer status` reads (internal/status) and acts
//     through internal/operator, as the command line does: no query of its
//     own. It reads status at most once per ReadEvery however many pages
//     are open, and nothing while nobody looks but a sample of a few
//     in-process counters every SampleEvery for the charts.
//   - Pages are rendered by the server (html/template, embedded, no CDN)
//     and refresh themselves with a meta refresh: they need no script.
package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/metrics"
)

// Prefix is where the console is served.
const Prefix = "/console"

// Defaults for Config.
const (
	SessionTTLDefault  = 12 * time.Hour
	RefreshDefault     = 5 * time.Second
	ReadEveryDefault   = 2 * time.Second
	SampleEveryDefault = 10 * time.Second
	// ProbeWaitDefault is how long Probe now waits for the probe's answer:
	// a held destination's daemon takes the probe at its next attempt,
	// within exporter.MaxSnoozeDefault (10 s), and answers within its
	// request's timeout; a page that waits longer than this looks broken.
	ProbeWaitDefault = 15 * time.Second
	// FailedSignInBurstDefault wrong tokens at once from one address,
	// then one every FailedSignInEveryDefault: a person who mistypes a few
	// times or a script with a stale token waits seconds, a guesser gets
	// 600 guesses an hour per address.
	FailedSignInBurstDefault = 10
	FailedSignInEveryDefault = 6 * time.Second
	// SignInAddressesDefault addresses with failures are remembered, a
	// few hundred bytes each.
	SignInAddressesDefault = 10_000
)

// Config configures a Console.
type Config struct {
	// Token is what a person or a script signs in with. Required.
	Token string
	// Formats names each destination's format, for the overview. Defaults
	// to none shown.
	Formats map[string]string
	// SessionTTL is how long a sign-in lasts. Defaults to
	// SessionTTLDefault.
	SessionTTL time.Duration
	// Refresh is how often a page reloads itself. Defaults to
	// RefreshDefault.
	Refresh time.Duration
	// ReadEvery is how often, at most, the console reads status, however
	// many pages are open: a page shows a report at most this old.
	// Defaults to ReadEveryDefault.
	ReadEvery time.Duration
	// SampleEvery is the step of the destination's chart. Defaults to
	// SampleEveryDefault.
	SampleEvery time.Duration
	// ProbeWait is how long Probe now waits for a daemon's answer to the
	// probe before saying none came. Defaults to ProbeWaitDefault.
	ProbeWait time.Duration
	// FailedSignInBurst wrong tokens (Bearer and form together) are
	// allowed at once from one client address, then one every
	// FailedSignInEvery; past that the address gets 429 until its wait
	// ends. Default to FailedSignInBurstDefault and
	// FailedSignInEveryDefault.
	FailedSignInBurst int
	FailedSignInEvery time.Duration
	// SignInAddresses is how many client addresses with failures are
	// remembered, the least recently failed forgotten first. Defaults to
	// SignInAddressesDefault.
	SignInAddresses int
	// TrustedProxies are the addresses of the reverse proxies in front of
	// the console: a request from one of them is counted against the
	// address its X-Forwarded-For names (read from the right, past the
	// trusted proxies). Defaults to none: the header is never read, and
	// every request is counted against its connection's address.
	TrustedProxies []netip.Prefix
	// Logger receives what went wrong serving a page. Defaults to
	// discarding.
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	out := *c
	out.SessionTTL = cmp.Or(out.SessionTTL, SessionTTLDefault)
	out.Refresh = cmp.Or(out.Refresh, RefreshDefault)
	out.SampleEvery = cmp.Or(out.SampleEvery, SampleEveryDefault)
	out.ReadEvery = cmp.Or(out.ReadEvery, ReadEveryDefault)
	out.ProbeWait = cmp.Or(out.ProbeWait, ProbeWaitDefault)
	out.FailedSignInBurst = cmp.Or(out.FailedSignInBurst, FailedSignInBurstDefault)
	out.FailedSignInEvery = cmp.Or(out.FailedSignInEvery, FailedSignInEveryDefault)
	out.SignInAddresses = cmp.Or(out.SignInAddresses, SignInAddressesDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// ErrNoToken is returned by New without a token.
var ErrNoToken = errors.New("console: a token is required")

// Console serves the console's pages.
type Console struct {
	cfg      Config
	pool     *pgxpool.Pool
	sessions *sessions
	failures *failures
	metrics  *metrics.Metrics
	history  *history
	reports  *reports
	pages    *pages
	handler  http.Handler
	now      func() time.Time
}

// New returns a Console reading pool. m is the daemon's metrics, sampled
// for the charts (nil: empty charts); the sampling runs until ctx ends.
func New(ctx context.Context, pool *pgxpool.Pool, m *metrics.Metrics, cfg *Config) (*Console, error) {
	if cfg == nil || cfg.Token == "" {
		return nil, ErrNoToken
	}
	if pool == nil {
		return nil, errors.New("console: pool is required")
	}
	c := &Console{cfg: cfg.withDefaults(), pool: pool, metrics: m, now: time.Now}
	if c.cfg.SessionTTL < 0 || c.cfg.Refresh < 0 || c.cfg.SampleEvery < 0 || c.cfg.ReadEvery < 0 || c.cfg.FailedSignInEvery < 0 || c.cfg.FailedSignInBurst < 0 || c.cfg.SignInAddresses < 0 {
		return nil, fmt.Errorf("console: config: durations, counts and rates must not be negative")
	}
	c.sessions = newSessions(c.cfg.SessionTTL)
	c.reports = &reports{pool: pool, every: c.cfg.ReadEvery}
	c.failures = newFailures(c.cfg.FailedSignInEvery, c.cfg.FailedSignInBurst, c.cfg.SignInAddresses)
	c.history = newHistory(m, c.cfg.SampleEvery, time.Hour)
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	c.pages = p
	go c.history.run(ctx)
	c.handler = http.NewCrossOriginProtection().Handler(c.routes())
	return c, nil
}

// ServeHTTP serves /console and below.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	c.handler.ServeHTTP(w, r)
}

// authed wraps a handler that needs the token: 401 and the sign-in form
// otherwise; a POST without the session's proof gets 403.
func (c *Console) authed(h func(http.ResponseWriter, *http.Request, caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cl, ok, wait := c.authenticate(r)
		if wait > 0 {
			limited(w, wait)
			return
		}
		if !ok {
			next := ""
			if r.Method == http.MethodGet {
				next = r.URL.RequestURI()
			}
			c.renderSignIn(w, http.StatusUnauthorized, "", next)
			return
		}
		if r.Method == http.MethodPost && !cl.proofOK(r) {
			http.Error(w, "403 forbidden: this form is not from this console's session; reload the page", http.StatusForbidden)
			return
		}
		h(w, r, cl)
	}
}

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix, c.authed(c.overview))
	mux.HandleFunc("GET "+Prefix+"/{$}", c.authed(c.overview))
	mux.HandleFunc("POST "+Prefix+"/signin", c.signIn)
	mux.HandleFunc("POST "+Prefix+"/signout", c.authed(c.signOut))
	mux.HandleFunc("GET "+Prefix+"/sources/{name}", c.authed(c.sourcePage))
	mux.HandleFunc("GET "+Prefix+"/sources/{name}/replay", c.authed(c.replayDryRun))
	mux.HandleFunc("GET "+Prefix+"/sources/{name}/tenants", c.authed(c.tenantsPage))
	mux.HandleFunc("POST "+Prefix+"/sources/{name}/tenants/{action}", c.authed(c.tenantAction))
	mux.HandleFunc("POST "+Prefix+"/sources/{name}/replay", c.authed(c.replayStart))
	mux.HandleFunc("POST "+Prefix+"/sources/{name}/retry", c.authed(c.retry))
	mux.HandleFunc("POST "+Prefix+"/sources/{name}/verify", c.authed(c.verifyNow))
	mux.HandleFunc("POST "+Prefix+"/replays/{id}/cancel", c.authed(c.replayCancel))
	mux.HandleFunc("GET "+Prefix+"/destinations/{name}", c.authed(c.destinationPage))
	mux.HandleFunc("GET "+Prefix+"/history", c.authed(c.storyPage))
	mux.HandleFunc("POST "+Prefix+"/destinations/{name}/{action}", c.authed(c.destinationAction))
	mux.HandleFunc(Prefix+"/", c.authed(func(w http.ResponseWriter, r *http.Request, _ caller) {
		http.NotFound(w, r)
	}))
	return mux
}
