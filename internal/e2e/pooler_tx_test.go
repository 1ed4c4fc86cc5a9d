package e2e

import (
	"context"
	"encoding/json"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/locks"
)

// txPoolerBundle is a fresh schema behind PgBouncer in transaction mode
// (stock settings), with a role whose search_path is the schema (what a
// transaction pooler needs: it passes no search_path in the startup
// packet), the URL through the pooler as that role and the direct URL
// (SYNCER_DIRECT_URL). Neither names its sessions: a daemon's are named
// after its pid, which says which daemon holds a lock.
type txPoolerBundle struct {
	*poolerBundle
	pooled, direct string
}

func setupTxPooler(t *testing.T) *txPoolerBundle {
	t.Helper()
	var tx *dbtest.TxPooler
	b := newPoolerBundle(t, func(dsn, schema string) (string, *dbtest.PgBouncer) {
		tx = dbtest.StartTxPooler(t, dsn, schema)
		return tx.Pooled, tx.PgBouncer
	})
	return &txPoolerBundle{poolerBundle: b, pooled: tx.Pooled, direct: tx.Direct}
}

// holder says which daemon (its pid) holds the export lock.
func (b *txPoolerBundle) holder(t *testing.T) (int, bool) {
	t.Helper()
	h, held, err := locks.HolderOf(context.Background(), b.pool, locks.ExportKey(b.schema, jobs.Resources))
	require.NoError(t, err)
	return h.Process, held
}

// With DATABASE_URL through PgBouncer in transaction mode and
// SYNCER_DIRECT_URL beside it: migrate, status, export, replay and a
// takeover work (takeoverThroughPooler). Without SYNCER_DIRECT_URL see
// TestPgBouncerTransactionPoolingWithoutDirectURL.
func TestPgBouncerTransactionPoolingWithDirectURL(t *testing.T) {
	t.Parallel()
	b := setupTxPooler(t)
	b.takeoverThroughPooler(t, "transaction pooling", []string{"--direct-url", b.direct}, nil, nil)
}

// takeoverThroughPooler is what both pooling modes must do, every command
// given the pooled URL and direct (the direct URL's flag, or none):
// migrate, status, export by two daemons, a takeover, a replay and a
// destination paused and resumed. The holder daemon, frozen (SIGSTOP)
// mid-drain, loses the export to the other within the lease + 20 s; woken,
// it sends nothing, and no pair ever went out under two keys. midDrain
// runs while the first daemon exports, stopped once both have stopped;
// either may be nil. name starts the takeover's log line.
func (b *txPoolerBundle) takeoverThroughPooler(t *testing.T, name string, direct []string, midDrain, stopped func()) {
	t.Helper()
	const rows, updated = 4000, 300
	conn := append([]string{"--database-url", b.pooled}, direct...)
	withConn := func(args ...string) []string { return append(args, conn...) }

	code, _, errOut := syncerCmd(t, withConn("migrate")...)
	require.Equal(t, 0, code, "migrate: %s\npgbouncer:\n%s", errOut, b.pgb.Log())
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, rows)

	code, out, errOut := syncerCmd(t, withConn("status", "--json")...)
	require.Equal(t, 0, code, "status: %s", errOut)
	var st struct{ Total, Unsynced int64 }
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, int64(rows), st.Total)

	// Two daemons, slow enough to be mid-drain for seconds.
	args := append(slices.Clone(direct), "--batch-size", "50", "--rate-limit", "8")
	first, firstErr, second, secondErr := b.startHolderThenSecond(t, b.pooled, func() (int, bool) { return b.holder(t) }, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the first daemon's log:\n%s\nthe second's:\n%s", firstErr.String(), secondErr.String())
		}
	})
	waitFor(t, time.Minute, "mid-drain", func() bool { return b.fake.Stats().DistinctPairs >= 600 })
	if midDrain != nil {
		midDrain()
	}

	require.NoError(t, first.Process.Signal(syscall.SIGSTOP))
	frozenAt := time.Now()
	waitFor(t, 45*time.Second, "the second daemon takes over", func() bool {
		pid, held := b.holder(t)
		return held && pid == second.Process.Pid
	})
	took := time.Since(frozenAt)
	t.Logf("%s: takeover %.1fs after the freeze", name, took.Seconds())
	require.Less(t, took, 30*time.Second, "within the lease (10 s) + 20 s")
	b.exec(t, `UPDATE resources SET payload = jsonb_build_object('updated', id) WHERE id <= $1`, updated)
	b.waitAllSynced(t, time.Until(frozenAt.Add(100*time.Second)))
	before := b.fake.Stats()
	require.NoError(t, first.Process.Signal(syscall.SIGCONT))
	time.Sleep(5 * time.Second)
	after := b.fake.Stats()
	t.Logf("after the wake: %d requests more, %d pairs of %d, %d under two keys, %d out of order",
		after.Requests-before.Requests, after.DistinctPairs, rows+updated, after.DuplicatesOtherKey, after.OutOfOrder)
	require.Equal(t, before.Requests, after.Requests, "the woken daemon sent nothing")
	require.Equal(t, int64(rows+updated), after.DistinctPairs, "every row and update delivered")
	require.Zero(t, after.DuplicatesOtherKey, "no pair under two keys")
	require.Zero(t, after.OutOfOrder)

	// A replay through the pooler, exported by the daemon left.
	b.fake.Reset()
	code, out, errOut = syncerCmd(t, withConn("replay", "--from-id", "1", "--to-id", "100", "--log-level", "error")...)
	require.Equal(t, 0, code, "replay: %s", errOut)
	require.Contains(t, out, "100 rows")
	waitFor(t, time.Minute, "the replay delivered", func() bool { return b.fake.Stats().DistinctPairs >= 100 })

	for _, cmd := range []*exec.Cmd{first, second} {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	}
	require.NoError(t, first.Wait(), firstErr.String())
	require.NoError(t, second.Wait(), secondErr.String())
	for _, log := range []string{firstErr.String(), secondErr.String()} {
		require.NotContains(t, log, "prepared statement", "no prepared statement lost between server sessions")
		require.NotContains(t, log, "LISTEN hears no notifications")
	}
	require.Contains(t, firstErr.String(), "lock lost", "the woken daemon says it lost the lock")
	require.False(t, strings.Contains(b.pgb.Log(), "bad client state"), "PgBouncer:\n%s", b.pgb.Log())
	if stopped != nil {
		stopped()
	}

	// A configured source's destination, paused and resumed through the
	// pooler: nothing goes out while paused, everything after.
	dest := newDestination(t, fakethirdparty.Config{})
	cfgFile := b.installSlowOrders(t, dest)
	run, runErr := b.startRun(t, b.pooled, append(slices.Clone(direct), "--config", cfgFile)...)
	b.exec(t, `INSERT INTO orders SELECT g, 1 FROM generate_series(1, 40) g`)
	b.waitSourcesDrained(t, "orders")
	code, out, errOut = syncerCmd(t, withConn("pause", "--destination", "crm")...)
	require.Equal(t, 0, code, "pause: %s", errOut)
	require.Contains(t, out, "destination crm paused")
	time.Sleep(2 * time.Second) // the daemon reads the shared facts every second
	sent := len(dest.fake.Deliveries())
	b.exec(t, `INSERT INTO orders SELECT g, 1 FROM generate_series(41, 60) g`)
	time.Sleep(3 * time.Second)
	require.Len(t, dest.fake.Deliveries(), sent, "nothing sent while paused")
	code, _, errOut = syncerCmd(t, withConn("resume", "--destination", "crm")...)
	require.Equal(t, 0, code, "resume: %s", errOut)
	b.waitSourcesDrained(t, "orders")
	require.Len(t, byID(dest.fake), 60)
	requireOnceInOrder(t, dest.fake)
	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	require.NoError(t, run.Wait(), runErr.String())
}

// A tenant source of 4 lanes through PgBouncer in transaction mode, with
// SYNCER_DIRECT_URL (tenantsThroughTxPooler). What the daemon holds: on
// the direct URL the holder and the relay's LISTEN, nothing else (River
// polls through the pool); the pool's server sessions are PgBouncer's,
// shared with its other clients.
func TestTenantsThroughTransactionPooling(t *testing.T) {
	t.Parallel()
	w, tx, cmd, runErr := tenantsThroughTxPooler(t, true)
	time.Sleep(2 * time.Second)
	var direct, pooled int64
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE application_name LIKE '% %:' || $1::text AND usename <> $2),
		count(*) FILTER (WHERE usename = $2)
		FROM pg_stat_activity WHERE pid <> pg_backend_pid()`, strconv.Itoa(cmd.Process.Pid), tx.Role).Scan(&direct, &pooled))
	t.Logf("transaction pooling, idle: %d direct sessions, %d PgBouncer server sessions of the role", direct, pooled)
	require.LessOrEqual(t, direct, int64(2), "the holder and the relay's LISTEN")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), runErr.String())
	require.NotContains(t, runErr.String(), "prepared statement")
}

// tenantsThroughTxPooler starts a daemon on a tenant source of 4 lanes
// through PgBouncer in transaction mode, with SYNCER_DIRECT_URL or
// without, and checks what both modes must do: every connected tenant's
// rows reach its own account, once and in order, an unconnected tenant's
// wait, and its rows go once its connection row appears (the tenants
// query, transaction-local settings, through the pooler). The daemon is
// left running for the caller to look at what it holds.
func tenantsThroughTxPooler(t *testing.T, direct bool) (w *tenantWorld, tx *dbtest.TxPooler, cmd *exec.Cmd, runErr *dbtest.Buffer) {
	t.Helper()
	w = newTenantWorld(t, fakethirdparty.Config{})
	d, err := url.Parse(w.dsn)
	require.NoError(t, err)
	tx = dbtest.StartTxPooler(t, w.dsn, d.Query().Get("search_path"))

	tenants := []string{"t1", "t2", "t3", "t4"}
	for _, tn := range tenants[:3] {
		w.exec(t, `INSERT INTO crm_connections VALUES ($1, 'tok-' || $1)`, tn)
	}
	args := []string{"run", "--database-url", tx.Pooled}
	if direct {
		args = append(args, "--direct-url", tx.Direct)
	}
	cmd = exec.Command(w.bin, append(args, "--config", w.config(t, w.fakeURL, 4),
		"--thirdparty-url", w.fakeURL, "--http-addr", freePort(t), "--log-level", "warn")...)
	runErr = &dbtest.Buffer{}
	cmd.Stderr = runErr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s\nPgBouncer's:\n%s", runErr.String(), tx.Log())
		}
	})
	w.exec(t, `INSERT INTO contacts (id, account) SELECT g, 't' || ((g - 1) % 4 + 1) FROM generate_series(1, 80) g`)
	waitFor(t, time.Minute, "the connected tenants' rows at their accounts", func() bool {
		for _, tn := range tenants[:3] {
			if !w.holds(tn, 20, nil) {
				return false
			}
		}
		return true
	})
	require.Empty(t, w.latest("t4"), "an unconnected tenant sends nothing")
	w.exec(t, `INSERT INTO crm_connections VALUES ('t4', 'tok-t4')`)
	waitFor(t, time.Minute, "the tenant connected last", func() bool { return w.holds("t4", 20, nil) })
	w.requireTenantsOnceInOrder(t)
	return w, tx, cmd, runErr
}
