package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 58: SYNCER_DIRECT_URL names a role and, where the server asks for
// one, its password. A daemon run with a direct URL that carries one (the
// role's own, set with ALTER ROLE; the test server trusts, so the
// password travels unchecked, which is all the test needs), its direct
// sessions ended once so that the holder and the relay's LISTEN log their
// losses and reconnect, and the commands refused with it (a server that
// is not there, a URL that does not parse, a run that cannot start):
// every log line, every error, `status` and `status --json`, and the
// metrics are searched for the password in every form it may take. None
// holds it.
func TestDirectURLPasswordNeverShown(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	bin := syncerBinary(t)
	d, err := url.Parse(b.dsn)
	require.NoError(t, err)
	role := dbtest.NewRole(t, d.Query().Get("search_path"))
	pw := echoedSecret{"the direct URL's password", role, "Dir3ct/Pass+w=rd&6?"}
	b.exec(t, `ALTER ROLE `+pgx.Identifier{role}.Sanitize()+` PASSWORD '`+pw.secret+`'`)
	withPassword := func(host string, query url.Values) string {
		u := *d
		u.User = url.UserPassword(role, pw.secret)
		u.Host = host
		if query != nil {
			u.RawQuery = query.Encode()
		}
		return u.String()
	}
	direct := withPassword(d.Host, nil)
	require.Contains(t, direct, url.UserPassword(role, pw.secret).String(), "the password in the URL, escaped as a URL's user info")

	addr := freePort(t)
	daemonLog := &dbtest.Buffer{}
	cmd := exec.Command(bin, "run", "--database-url", b.dsn, "--direct-url", direct,
		"--thirdparty-url", b.fakeURL, "--http-addr", addr, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = daemonLog, daemonLog
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, jsonb_build_object('n', g) FROM generate_series(1, 20) g`)
	b.waitAllSynced(t, time.Minute)
	directSessions := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role).Scan(&n))
		return n
	}
	require.Positive(t, directSessions(), "the holder and the relay's LISTEN on the direct URL")
	// Their losses logged, with the errors, and their reconnection.
	b.exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
	waitFor(t, 30*time.Second, "the relay's LISTEN again on the direct URL", func() bool {
		return strings.Contains(daemonLog.String(), "listener lost its connection") && directSessions() > 0
	})
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, jsonb_build_object('n', g) FROM generate_series(21, 40) g`)
	b.waitAllSynced(t, time.Minute)

	shown := map[string]string{}
	command := func(env []string, args ...string) string {
		t.Helper()
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), env...)
		out, _ := c.CombinedOutput() // refusals exit non-zero: their text is what is searched
		return string(out)
	}
	shown["status"] = command(nil, "status", "--database-url", b.dsn, "--direct-url", direct)
	shown["status --json"] = command(nil, "status", "--json", "--database-url", b.dsn, "--direct-url", direct)
	require.Contains(t, shown["status --json"], `"sessions"`)
	closed := freePort(t)
	shown["status, the direct URL's server not there"] = command(nil, "status", "--database-url", b.dsn, "--direct-url", withPassword(closed, nil))
	shown["status, a direct URL that does not parse"] = command(nil, "status", "--database-url", b.dsn,
		"--direct-url", withPassword(d.Host, url.Values{"connect_timeout": {"soon"}}))
	shown["migrate, the direct URL's server not there"] = command(nil, "migrate", "--database-url", b.dsn, "--direct-url", withPassword(closed, nil))
	shown["run, SYNCER_DIRECT_URL's server not there"] = command([]string{"SYNCER_DIRECT_URL=" + withPassword(closed, nil)},
		"run", "--database-url", b.dsn, "--thirdparty-url", b.fakeURL, "--http-addr", "off")
	for what, out := range shown {
		if strings.Contains(what, "not there") || strings.Contains(what, "parse") {
			require.NotEmpty(t, strings.TrimSpace(out), "%s says why", what)
		}
	}
	shown["metrics"] = metricsText(t, addr)
	shown["the daemon's log"] = daemonLog.String()

	require.Empty(t, leaks(shown, pw), "the direct URL's password shown")
}
