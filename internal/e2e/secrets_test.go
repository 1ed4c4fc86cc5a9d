package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// echoedSecret is a secret and the id it goes with in a Basic header
// (none for a refresh token).
type echoedSecret struct{ name, id, secret string }

// forms is every form a third party may echo of the secret: as is,
// URL-encoded (query, path and a URL's user info), the base64 of it alone, and the base64 of
// "id:secret" of a Basic header, as Go's client sends it and as OAuth2
// clients do (both URL-encoded first), in the standard and URL alphabets,
// with and without padding. Written out here, apart from package redact,
// so the test does not check the code with itself.
func (s echoedSecret) forms() map[string]string {
	out := map[string]string{
		"as is":                  s.secret,
		"query-escaped":          url.QueryEscape(s.secret),
		"path-escaped":           url.PathEscape(s.secret),
		"a URL's user info":      strings.TrimPrefix(url.UserPassword("", s.secret).String(), ":"),
		"JSON-escaped (\\u0026)": strings.ReplaceAll(s.secret, "&", `\u0026`),
	}
	encs := map[string]*base64.Encoding{"std": base64.StdEncoding, "raw std": base64.RawStdEncoding, "url": base64.URLEncoding, "raw url": base64.RawURLEncoding}
	for name, enc := range encs {
		out["base64 "+name+" of the secret"] = enc.EncodeToString([]byte(s.secret))
		if s.id != "" {
			out["base64 "+name+" of id:secret"] = enc.EncodeToString([]byte(s.id + ":" + s.secret))
			out["base64 "+name+" of the URL-encoded id:secret"] = enc.EncodeToString([]byte(url.QueryEscape(s.id) + ":" + url.QueryEscape(s.secret)))
		}
	}
	return out
}

// Issue 54, points 2 and 7: a token endpoint that quotes the request's
// Authorization (a Basic header of the client's id and secret) and its
// form (a refresh token) in its refusal, and a third party whose records
// show the Authorization they were sent with. The daemon (`syncer run`)
// sends to a plain destination with oauth2_client_credentials and to a
// tenant destination whose rows give client credentials, a refresh token
// (with the application's client) and basic auth; then every log line,
// `status` and `status --json`, the console's pages, the metrics,
// `probe`'s output, `verify --tenant`'s examples (text and --json) and
// every row of syncer's own tables are searched for every secret in every
// form.
func TestSecretsInEveryFormNeverShown(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{EchoAuthorization: true, Lookup: true})
	bin := syncerBinary(t)
	plain := echoedSecret{"the plain destination's client secret", "plain-client", "pl/ain+Se=cret&?1"}
	app := echoedSecret{"the application's client secret", "app-client", "app/Sec+ret=2&x"}
	cc := echoedSecret{"tenant cc's client secret", "cc-client", "cc/Sec+ret=3&y"}
	rt := echoedSecret{"tenant rt's refresh token", "", "rt/Refresh+tok=4&z"}
	ba := echoedSecret{"tenant ba's password", "ba-user", "ba/Pass+word=5&w"}
	secrets := []echoedSecret{plain, app, cc, rt, ba}

	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, total int NOT NULL)`)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, v int NOT NULL DEFAULT 0)`)
	b.exec(t, `CREATE TABLE crm_conns (account_id text PRIMARY KEY, client_id text, client_secret text, refresh_token text, username text, password text)`)
	b.exec(t, `INSERT INTO crm_conns VALUES ('cc', $1, $2, NULL, NULL, NULL), ('rt', NULL, NULL, $3, NULL, NULL), ('ba', NULL, NULL, NULL, $4, $5)`,
		cc.id, cc.secret, rt.secret, ba.id, ba.secret)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "syncer.yaml")
	require.NoError(t, os.WriteFile(cfgPath, fmt.Appendf(nil, `destinations:
  plain:
    url: %[1]s
    auth:
      type: oauth2_client_credentials
      token_url: %[1]s/oauth/token
      client_id_file: %[2]s
      client_secret_file: %[3]s
  crm:
    url: %[1]s/t/{tenant}
    tenants:
      query: SELECT client_id, client_secret, refresh_token, username, password FROM crm_conns WHERE account_id = $1
    auth: {token_url: "%[1]s/t/{tenant}/oauth/token", client_id_file: %[4]s, client_secret_file: %[5]s}
sources:
  - {table: orders, key: id, destination: plain}
  - {table: contacts, key: id, tenant: account, destination: crm, batch_size: 10}
`, b.fakeURL, secretFile(t, dir, "plain-id", plain.id), secretFile(t, dir, "plain-secret", plain.secret),
		secretFile(t, dir, "app-id", app.id), secretFile(t, dir, "app-secret", app.secret)), 0o600))
	out, err := exec.Command(bin, "migrate", "--database-url", b.dsn, "--config", cfgPath).CombinedOutput()
	require.NoError(t, err, "%s", out)

	const consoleToken = "console-token-of-the-secrets-test"
	addr := freePort(t)
	daemonLog := &dbtest.Buffer{}
	cmd := exec.Command(bin, "run", "--database-url", b.dsn, "--config", cfgPath,
		"--thirdparty-url", b.fakeURL, "--http-addr", addr, "--log-level", "debug")
	cmd.Env = append(os.Environ(), "SYNCER_CONSOLE_TOKEN="+consoleToken)
	cmd.Stdout, cmd.Stderr = daemonLog, daemonLog
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(1, 5) g`)
	b.exec(t, `INSERT INTO contacts (id, account) SELECT g, (ARRAY['cc', 'rt', 'ba'])[(g - 1) % 3 + 1] FROM generate_series(1, 9) g`)
	// The three grants refused, each quoting what it was sent, and the
	// tenant with basic auth delivered.
	waitFor(t, 90*time.Second, "three refusals quoting the Authorization in status, and ba's rows", func() bool {
		if len(b.fake.TenantDeliveries("ba")) != 3 || !strings.Contains(tablesText(t, b), "you sent Authorization") {
			return false
		}
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		st, err := json.Marshal(rep)
		require.NoError(t, err)
		for _, endpoint := range []string{"/oauth/token", "/t/cc/oauth/token", "/t/rt/oauth/token"} {
			if !strings.Contains(string(st), "token endpoint "+b.fakeURL+endpoint+": answered 401: invalid_client: you sent Authorization") {
				return false
			}
		}
		return true
	})

	// syncer's own commands, as a person runs them.
	syncerCmd := func(args ...string) string {
		t.Helper()
		c := exec.Command(bin, append(args, "--database-url", b.dsn)...)
		got, err := c.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			require.NoError(t, err)
		}
		return string(got)
	}
	shown := map[string]string{}
	shown["probe --destination plain"] = syncerCmd("probe", "--destination", "plain", "--wait", "20s")
	shown["probe --destination crm --tenant cc"] = syncerCmd("probe", "--destination", "crm", "--tenant", "cc", "--wait", "20s")
	shown["probe --destination crm --tenant rt"] = syncerCmd("probe", "--destination", "crm", "--tenant", "rt", "--wait", "20s")
	// The third party's records show the tenant's Authorization: verify
	// reads them stale, and its examples show them scrubbed.
	shown["verify --tenant ba"] = syncerCmd("verify", "--config", cfgPath, "--source", "contacts", "--tenant", "ba")
	shown["verify --tenant ba --json"] = syncerCmd("verify", "--config", cfgPath, "--source", "contacts", "--tenant", "ba", "--json")
	require.Contains(t, shown["verify --tenant ba --json"], `"seen_authorization":"Basic `, "verify shows the third party's echo")
	shown["status"] = syncerCmd("status")
	shown["status --json"] = syncerCmd("status", "--json")
	require.Contains(t, shown["status --json"], "you sent Authorization: Basic ", "the token endpoint's echo reached status")
	for _, page := range []string{"/console/", "/console/destinations/plain", "/console/destinations/crm",
		"/console/sources/orders", "/console/sources/contacts", "/console/sources/contacts/tenants", "/console/history"} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+page, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "console page %s", page)
		shown["console "+page] = string(body)
	}
	shown["metrics"] = metricsText(t, addr)
	shown["syncer's tables"] = tablesText(t, b)
	shown["the daemon's log"] = daemonLog.String()

	require.Empty(t, leaks(shown, secrets...), "secrets shown")
	require.Contains(t, shown["verify --tenant ba --json"], `"seen_authorization":"Basic [redacted]"`)
	require.Contains(t, shown["status --json"], "you sent Authorization: Basic [redacted]")
}

// leaks is each text shown that holds a form of a secret, as "what:
// the secret's name, form", sorted.
func leaks(shown map[string]string, secrets ...echoedSecret) []string {
	var out []string
	for what, text := range shown {
		for _, s := range secrets {
			for form, v := range s.forms() {
				if strings.Contains(text, v) {
					out = append(out, fmt.Sprintf("%s: %s, %s", what, s.name, form))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// tablesText is every row of syncer's own tables (syncer_state,
// syncer_history...) as text.
func tablesText(t *testing.T, b *bundle) string {
	t.Helper()
	ctx := context.Background()
	rows, err := b.pool.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'syncer\_%' ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, names, "syncer_state")
	require.Contains(t, names, "syncer_history")
	var all strings.Builder
	for _, name := range names {
		rows, err := b.pool.Query(ctx, `SELECT t::text FROM `+pgx.Identifier{name}.Sanitize()+` t`)
		require.NoError(t, err)
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, text := range texts {
			all.WriteString(name + ": " + text + "\n")
		}
	}
	return all.String()
}
