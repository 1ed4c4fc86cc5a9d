package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Through PgBouncer in transaction mode with SYNCER_DIRECT_URL, the tools
// a DBA or an operator reaches for: verify finds nothing drifted, then
// every key missing at a third party that lost what it held; --heal makes
// them pending and the daemon sends them again; history tells a key's two
// versions, in text and JSON; the console's overview, its destination page
// and its history page answer with the source, the destination and the
// key's story. The daemon says at start that the role lacks
// idle_in_transaction_session_timeout.
func TestVerifyHistoryConsoleThroughTransactionPooling(t *testing.T) {
	t.Parallel()
	b := setupTxPooler(t)
	const rows = 30
	db := []string{"--database-url", b.pooled, "--direct-url", b.direct}

	code, _, errOut := syncerCmd(t, append([]string{"migrate"}, db...)...)
	require.Equal(t, 0, code, "migrate: %s\npgbouncer:\n%s", errOut, b.pgb.Log())
	dest := newDestination(t, fakethirdparty.Config{Lookup: true})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, v int)`)
	cfgText := fmt.Sprintf("destinations:\n  crm:\n    url: %s\nsources:\n  - {table: orders, key: id, destination: crm}\n", dest.url)
	b.installSources(t, sourcesConfig(t, cfgText, nil))
	cfgFile := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfgText), 0o600))
	urls := db // history reads no configuration
	db = append(db, "--config", cfgFile)

	addr := freePort(t)
	run := exec.Command(syncerBinary(t), append([]string{"run", "--http-addr", addr, "--log-level", "warn"}, db...)...)
	run.Env = append(os.Environ(), "SYNCER_CONSOLE_TOKEN="+consoleToken)
	runErr := &dbtest.Buffer{}
	run.Stderr = runErr
	require.NoError(t, run.Start())
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s\nPgBouncer's:\n%s", runErr.String(), b.pgb.Log())
		}
	})
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(1, $1) g`, rows)
	b.waitSourcesDrained(t, "orders")

	verify := func(extra ...string) (int, string) {
		t.Helper()
		code, out, errOut := syncerCmd(t, append(append([]string{"verify", "--source", "orders", "--log-level", "warn"}, db...), extra...)...)
		require.NotContains(t, errOut, "prepared statement")
		require.Contains(t, []int{0, 3}, code, "verify %v: %s", extra, errOut)
		return code, out
	}
	code, out := verify()
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "source orders: 30 keys checked: 30 ok, 0 missing, 0 stale, 0 zombie, 0 failed, 0 unknown, 0 pending\nnothing drifted\n")

	// The third party loses everything: every key missing, healed.
	dest.fake.Reset()
	code, out = verify()
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "30 keys checked: 0 ok, 30 missing")
	require.Contains(t, out, "30 keys drifted")
	code, out = verify("--heal")
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "30 drifted keys are pending again")
	waitFor(t, time.Minute, "the healed keys sent again", func() bool { return len(byID(dest.fake)) == rows })
	b.waitSourcesDrained(t, "orders")
	code, out = verify()
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "30 ok, 0 missing")

	code, out, errOut = syncerCmd(t, append([]string{"history", "--source", "orders", "--key", "7", "--json"}, urls...)...)
	require.Equal(t, 0, code, "history --json: %s", errOut)
	var story history.Story
	require.NoError(t, json.Unmarshal([]byte(out), &story), out)
	require.Len(t, story.Versions, 2, "the export's and the heal's")
	for _, v := range story.Versions {
		require.Equal(t, history.Accepted, v.Settled, "version %d", v.Version)
		require.Equal(t, "crm", v.Entries[len(v.Entries)-1].Destination)
	}
	code, out, errOut = syncerCmd(t, append([]string{"history", "--source", "orders", "--key", "7"}, urls...)...)
	require.Equal(t, 0, code, "history: %s", errOut)
	require.Contains(t, out, "orders key 7: 2 versions")
	for _, v := range story.Versions {
		require.Contains(t, out, fmt.Sprintf("version %d: accepted, captured ", v.Version))
	}
	require.Contains(t, out, "accepted  crm  HTTP 200")

	bearer := http.Header{"Authorization": {"Bearer " + consoleToken}}
	base := "http://" + addr
	code, body := get(t, http.DefaultClient, base+"/console", bearer)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `href="/console/sources/orders"`)
	require.Contains(t, body, `href="/console/destinations/crm"`)
	code, body = get(t, http.DefaultClient, base+"/console/destinations/crm", bearer)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="pause"`, "crm runs, and can be paused")
	require.Contains(t, body, `href="/console/sources/orders"`)
	code, body = get(t, http.DefaultClient, base+"/console/sources/orders", bearer)
	require.Equal(t, http.StatusOK, code, body)
	code, body = get(t, http.DefaultClient, base+"/console/history?source=orders&key=7", bearer)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, fmt.Sprintf("version %d", story.Versions[1].Version), "the heal's version")

	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	require.NoError(t, run.Wait(), runErr.String())
	require.NotContains(t, runErr.String(), "prepared statement")
	require.NotContains(t, runErr.String(), `"level":"ERROR"`)
	// The test's role has no idle_in_transaction_session_timeout: said at
	// start, with the fix.
	require.Contains(t, runErr.String(), "the role lacks a setting a transaction pooler needs")
	require.Contains(t, runErr.String(), b.schema+`\" SET idle_in_transaction_session_timeout = '10s'`)
	require.NotContains(t, b.pgb.Log(), "bad client state")
}
