package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// A sign-in sends the browser on only to a page of the console: never to
// another host, whatever the form's next says.
func TestLocalPath(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/console/sources/orders":     "/console/sources/orders",
		"/console":                    "/console",
		"":                            "/console",
		"https://evil.example/":       "/console",
		"//evil.example/console":      "/console",
		"/consolex/../../evil":        "/console",
		"/console/../evil":            "/console",
		"/console/replay?from=1":      "/console/replay?from=1",
		"/console\\@evil.example":     "/console",
		"/console/\r\nSet-Cookie: x=": "/console",
	} {
		require.Equal(t, want, localPath(next), next)
	}
}

// The token is compared whatever the lengths, and only equal text passes.
func TestSameSecret(t *testing.T) {
	t.Parallel()
	require.True(t, sameSecret("abc", "abc"))
	require.False(t, sameSecret("abc", "abd"))
	require.False(t, sameSecret("ab", "abc"))
	require.False(t, sameSecret("", "abc"))
}

// consoleToken is the token of the consoles these tests serve.
const consoleToken = "the-console-token-0123456789"

// authSetup is a console served over a real HTTP server, its clock
// stopped (so a wait ends only when the test moves it), its log and its
// metrics kept.
type authSetup struct {
	url     string
	console *Console
	reg     *prometheus.Registry
	logs    *dbtest.Buffer

	mu  sync.Mutex
	now time.Time
}

// setupAuth serves a console with cfg (its token set here) through wrap,
// if any, in front of it.
func setupAuth(t *testing.T, cfg Config, wrap func(http.Handler) http.Handler) *authSetup {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Nothing these tests ask reads the database: the pool never connects.
	pool, err := pgxpool.New(ctx, dbtest.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := &authSetup{reg: prometheus.NewRegistry(), logs: &dbtest.Buffer{}, now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)}
	cfg.Token = consoleToken
	cfg.Logger = slog.New(slog.NewTextHandler(s.logs, nil))
	s.console, err = New(ctx, pool, metrics.New(s.reg), &cfg)
	require.NoError(t, err)
	s.console.now = func() time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.now
	}
	var h http.Handler = s.console
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *authSetup) advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

// from is a client whose connections come from ip (a loopback address:
// 127.0.0.0/8 is all the loopback's), so the server sees it as that
// address; it follows no redirect, so a sign-in shows its 303.
func from(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// answer is what the console answered, its body read.
type answer struct {
	code       int
	retryAfter string
	body       string
	cookies    []*http.Cookie
}

func (s *authSetup) do(t *testing.T, cl *http.Client, req *http.Request) answer {
	t.Helper()
	res, err := cl.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return answer{code: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), body: string(b), cookies: res.Cookies()}
}

// bearer asks a page of the console with tok: one that reads nothing of
// the database, so the right token gets its 404.
func (s *authSetup) bearer(t *testing.T, cl *http.Client, tok string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+"/console/no-such-page", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	return s.do(t, cl, req)
}

// form signs in with tok through the form.
func (s *authSetup) form(t *testing.T, cl *http.Client, tok string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+"/console/signin", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return s.do(t, cl, req)
}

// counter is a console series of the metrics, by path; 0 when absent.
func (s *authSetup) counter(t *testing.T, name, path string) float64 {
	t.Helper()
	families, err := s.reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "path" && l.GetValue() == path {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// requireLimited checks a 429 that says when to come back, within the
// default spacing of failures.
func requireLimited(t *testing.T, a answer, msg string) time.Duration {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, a.code, msg)
	secs, err := strconv.Atoi(a.retryAfter)
	require.NoError(t, err, "Retry-After %q: %s", a.retryAfter, msg)
	require.GreaterOrEqual(t, secs, 1, msg)
	require.LessOrEqual(t, secs, 6, msg)
	return time.Duration(secs) * time.Second
}

// Wrong Bearer tokens from one address reach 429 with Retry-After (on
// 3cfe467 they were 401 forever); the right token is refused too until
// the wait ends, then served; right tokens before never counted. The
// episode is logged once, without the token, and counted by path.
func TestBearerGuessesLimitedPerAddress(t *testing.T) {
	t.Parallel()
	s := setupAuth(t, Config{}, nil)
	cl := from("127.0.0.2")
	for range 30 {
		require.Equal(t, http.StatusNotFound, s.bearer(t, cl, consoleToken).code, "the right token is served and counts nothing")
	}
	guesses := 0
	var a answer
	for guesses = 1; guesses <= 1000; guesses++ {
		if a = s.bearer(t, cl, fmt.Sprintf("guess-%d", guesses)); a.code != http.StatusUnauthorized {
			break
		}
	}
	wait := requireLimited(t, a, "a guess past the limit")
	require.Equal(t, FailedSignInBurstDefault+1, guesses, "the default burst of wrong tokens, then 429")
	requireLimited(t, s.bearer(t, cl, consoleToken), "the right token from a limited address, before its wait ends")
	requireLimited(t, s.bearer(t, cl, "another-guess"), "still limited")

	s.advance(wait)
	require.Equal(t, http.StatusNotFound, s.bearer(t, cl, consoleToken).code, "the wait ended: the right token is served")
	require.Equal(t, http.StatusUnauthorized, s.bearer(t, cl, "one-more").code, "one failure given back by the wait")
	requireLimited(t, s.bearer(t, cl, "and-another"), "and limited again")

	require.InDelta(t, float64(FailedSignInBurstDefault+1), s.counter(t, "syncer_console_auth_failures_total", "bearer"), 0)
	require.InDelta(t, 4, s.counter(t, "syncer_console_auth_limited_total", "bearer"), 0)
	logs := s.logs.String()
	require.Equal(t, 2, strings.Count(logs, "too many wrong tokens"), "one warning per episode: %s", logs)
	require.Contains(t, logs, "address=127.0.0.2")
	require.NotContains(t, logs, consoleToken)
	require.NotContains(t, logs, "guess")
}

// Form and Bearer guesses from one address share one count, whichever
// path guessed most, and a limited address gets 429 with Retry-After on
// both paths, the form's page saying when to come back.
func TestFormAndBearerShareOneLimit(t *testing.T) {
	t.Parallel()
	s := setupAuth(t, Config{}, nil)
	// Mostly Bearer, then the form: the form is limited.
	cl := from("127.0.0.3")
	for range FailedSignInBurstDefault - 2 {
		require.Equal(t, http.StatusUnauthorized, s.bearer(t, cl, "guess").code)
	}
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, s.form(t, cl, "guess").code)
	}
	a := s.form(t, cl, consoleToken)
	requireLimited(t, a, "the form, after mostly Bearer guesses")
	require.Contains(t, a.body, "Too many wrong tokens")
	require.Contains(t, a.body, `name="token"`, "the sign-in page")
	require.Empty(t, a.cookies, "no session")
	requireLimited(t, s.bearer(t, cl, consoleToken), "Bearer, after the same guesses")

	// Mostly the form, then Bearer: Bearer is limited.
	cl = from("127.0.0.6")
	for range FailedSignInBurstDefault - 2 {
		require.Equal(t, http.StatusUnauthorized, s.form(t, cl, "guess").code)
	}
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, s.bearer(t, cl, "guess").code)
	}
	requireLimited(t, s.bearer(t, cl, consoleToken), "Bearer, after mostly form guesses")
	requireLimited(t, s.form(t, cl, consoleToken), "the form, after the same guesses")
	require.InDelta(t, float64(FailedSignInBurstDefault), s.counter(t, "syncer_console_auth_failures_total", "form"), 0)
	require.InDelta(t, float64(FailedSignInBurstDefault), s.counter(t, "syncer_console_auth_failures_total", "bearer"), 0)
	require.InDelta(t, 2, s.counter(t, "syncer_console_auth_limited_total", "form"), 0)
}

// One address's guesses never lock another out: while 127.0.0.4 is
// limited (it guessed through Bearer, which on 3cfe467 was free, and
// through the form, whose limit was the whole process's), 127.0.0.5
// signs in through both paths, and the browser 127.0.0.4 signed in with
// before it started guessing keeps its session.
func TestOneAddressNeverLimitsAnother(t *testing.T) {
	t.Parallel()
	s := setupAuth(t, Config{}, nil)
	guesser, other := from("127.0.0.4"), from("127.0.0.5")
	a := s.form(t, guesser, consoleToken)
	require.Equal(t, http.StatusSeeOther, a.code)
	require.NotEmpty(t, a.cookies)
	session := a.cookies[0]
	for range 200 {
		s.bearer(t, guesser, "guess")
	}
	for range 10 {
		s.form(t, guesser, "guess")
	}
	requireLimited(t, s.bearer(t, guesser, consoleToken), "the guesser, Bearer")
	requireLimited(t, s.form(t, guesser, consoleToken), "the guesser, form")

	require.Equal(t, http.StatusNotFound, s.bearer(t, other, consoleToken).code, "another address, Bearer")
	a = s.form(t, other, consoleToken)
	require.Equal(t, http.StatusSeeOther, a.code, "another address, form")
	require.NotEmpty(t, a.cookies, "signed in")
	require.Equal(t, http.StatusUnauthorized, s.bearer(t, other, "typo").code, "its own mistakes are its own")
	require.Equal(t, http.StatusUnauthorized, s.form(t, other, "typo").code)

	req, err := http.NewRequest(http.MethodGet, s.url+"/console/no-such-page", nil)
	require.NoError(t, err)
	req.AddCookie(session)
	require.Equal(t, http.StatusNotFound, s.do(t, guesser, req).code, "a session opened before the guesses keeps its pages")
}
