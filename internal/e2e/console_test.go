package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/console"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// consoleToken is the console's token in these tests: it must show
// nowhere.
const consoleToken = "console-secret-9f8e7d6c5b4a"

// consoleSetup is a daemon exporting source notes to destination crm (the
// fake behind dest), serving the console; logs holds every line it
// logged, at debug.
type consoleSetup struct {
	*bundle
	dest *destination
	base string
	logs *dbtest.Buffer
}

func startConsole(t *testing.T, destCfg fakethirdparty.Config, token string, mutate func(*console.Config)) *consoleSetup {
	t.Helper()
	b := setup(t, fakethirdparty.Config{})
	s := &consoleSetup{bundle: b, dest: newDestination(t, destCfg), logs: &dbtest.Buffer{}}
	b.exec(t, `CREATE TABLE notes (id bigint PRIMARY KEY, body text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s
    token_env: CRM_TOKEN
sources:
  - {table: notes, key: id, destination: crm}
`, s.dest.url), map[string]string{"CRM_TOKEN": "crm-token"})
	b.installSources(t, cfg)
	s.base = s.startDaemon(t, cfg, token, mutate)
	return s
}

// startDaemon starts a daemon of cfg's sources serving the console with
// token (none when empty), logging into s.logs, and returns its base URL.
func (s *consoleSetup) startDaemon(t *testing.T, cfg *config.Config, token string, mutate func(*console.Config)) string {
	t.Helper()
	d := s.bundle.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		c.Logger = slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if token == "" {
			return
		}
		c.Console = func(ctx context.Context, m *metrics.Metrics) (http.Handler, error) {
			cc := &console.Config{Token: token, Formats: map[string]string{"crm": "syncer"}, Logger: c.Logger}
			if mutate != nil {
				mutate(cc)
			}
			return console.New(ctx, s.pool, m, cc)
		}
	})
	return "http://" + d.addr
}

// get returns a GET's status and body.
func get(t *testing.T, client *http.Client, u string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

var (
	proofRE = regexp.MustCompile(`name="proof" value="([^"]+)"`)
	nextRE  = regexp.MustCompile(`name="next" value="[^"]*"`)
)

// The console without a token is not there; with one, nothing is shown
// or done without it (none, a wrong one, a wrong cookie: 401 and the
// sign-in form only); a change from another origin, or without the
// session's proof, is refused with 403 and changes nothing; sign-ins are
// rate-limited; the token shows in no log line, page or URL.
func TestConsoleRefusesWithoutToken(t *testing.T) {
	t.Parallel()
	t.Run("NoToken404", func(t *testing.T) {
		t.Parallel()
		s := startConsole(t, fakethirdparty.Config{}, "", nil)
		for _, p := range []string{"/console", "/console/", "/console/sources/notes"} {
			code, _ := get(t, http.DefaultClient, s.base+p, nil)
			require.Equal(t, http.StatusNotFound, code, p)
		}
	})
	s := startConsole(t, fakethirdparty.Config{}, consoleToken, nil)
	s.exec(t, `INSERT INTO notes VALUES (1, 'one')`)
	s.waitSourcesDrained(t, "notes")
	var seen []string // every page and URL the test saw
	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"none", nil},
		{"wrong bearer", http.Header{"Authorization": {"Bearer not-the-token"}}},
		{"token not as bearer", http.Header{"Authorization": {consoleToken}}},
		{"forged cookie", http.Header{"Cookie": {"syncer_console=forged"}}},
	} {
		for _, p := range []string{"/console", "/console/sources/notes", "/console/destinations/crm", "/console/sources/notes/replay?from=1&to=9"} {
			code, body := get(t, http.DefaultClient, s.base+p, tc.header)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s", tc.name, p)
			require.Contains(t, body, `name="token"`, "the sign-in form")
			data := nextRE.ReplaceAllString(body, "") // the page asked, to return to after signing in
			require.NotContains(t, data, "notes", "no data: %s %s", tc.name, p)
			require.NotContains(t, data, "crm")
			require.NotContains(t, data, "<table")
			seen = append(seen, body)
		}
	}
	bearer := http.Header{"Authorization": {"Bearer " + consoleToken}}
	code, body := get(t, http.DefaultClient, s.base+"/console", bearer)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/console/sources/notes"`)
	seen = append(seen, body)

	post := func(path string, form url.Values, header http.Header, client *http.Client) (int, string) {
		req, err := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header[k] = v
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		seen = append(seen, string(b), res.Request.URL.String())
		return res.StatusCode, string(b)
	}
	// Cross-origin, even with the token: refused, nothing paused.
	crossOrigin := http.Header{"Authorization": {"Bearer " + consoleToken}, "Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}
	code, _ = post("/console/destinations/crm/pause", nil, crossOrigin, http.DefaultClient)
	require.Equal(t, http.StatusForbidden, code)
	require.Nil(t, s.report(t).Destinations[0].Paused, "nothing changed")
	// Without the token: 401, nothing paused.
	code, _ = post("/console/destinations/crm/pause", nil, nil, http.DefaultClient)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Nil(t, s.report(t).Destinations[0].Paused)

	// A browser's session: the form's proof is required.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	code, _ = post("/console/signin", url.Values{"token": {"wrong"}}, nil, browser)
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = post("/console/signin", url.Values{"token": {consoleToken}, "next": {"/console/destinations/crm"}}, nil, browser)
	require.Equal(t, http.StatusOK, code, "signed in and sent to the page asked")
	require.Contains(t, body, "Destination crm")
	u, _ := url.Parse(s.base + "/console")
	cookies := jar.Cookies(u)
	require.Len(t, cookies, 1)
	require.NotEqual(t, consoleToken, cookies[0].Value)
	m := proofRE.FindStringSubmatch(body)
	require.NotNil(t, m)
	code, _ = post("/console/destinations/crm/pause", url.Values{"proof": {"not-the-proof"}}, nil, browser)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = post("/console/destinations/crm/pause", nil, http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}, browser)
	require.Equal(t, http.StatusForbidden, code)
	require.Nil(t, s.report(t).Destinations[0].Paused, "nothing changed")
	code, body = post("/console/destinations/crm/pause", url.Values{"proof": {m[1]}}, nil, browser)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "PAUSED by console")
	require.Equal(t, "console", s.report(t).Destinations[0].Paused.By)

	// Sign-ins are rate-limited whatever their outcome.
	limited := false
	for range 20 {
		if code, _ := post("/console/signin", url.Values{"token": {"guess"}}, nil, http.DefaultClient); code == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	require.True(t, limited, "sign-in attempts are rate-limited")

	for _, page := range seen {
		require.NotContains(t, page, consoleToken)
	}
	require.NotContains(t, s.logs.String(), consoleToken, "the token in no log line")
}
