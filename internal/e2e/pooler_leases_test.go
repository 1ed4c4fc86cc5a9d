package e2e

import (
	"context"
	"encoding/json"
	"net/url"
	"os/exec"
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

// role is the role the pooled URL logs in as.
func (b *txPoolerBundle) role(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(b.pooled)
	require.NoError(t, err)
	return u.User.Username()
}

// sessionState counts what the role's server sessions (PgBouncer's) hold
// that a transaction pooler would hand to another client: a session
// advisory lock of the export (a transaction's lock of the relay's or of
// a marking transaction is not one), and a LISTEN.
func (b *txPoolerBundle) sessionState(t *testing.T) (advisory, listening int64) {
	t.Helper()
	ek := locks.ExportKey(b.schema, jobs.Resources)
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		  WHERE a.usename = $1 AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		    AND (l.classid, l.objid) = (($2::bigint >> 32) & 4294967295, $2::bigint & 4294967295)),
		(SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND query ILIKE 'LISTEN %')`,
		b.role(t), ek).Scan(&advisory, &listening))
	return advisory, listening
}

// With DATABASE_URL through PgBouncer in transaction mode and no
// SYNCER_DIRECT_URL: migrate, status, export, a takeover, a replay and a
// destination paused and resumed work, the
// locks leases alone and the relay polling. The holder daemon, frozen
// (SIGSTOP) mid-drain, loses the export to the other within the lease +
// 20 s; woken, it sends nothing, and no pair ever went out under two
// keys. No session advisory lock and no LISTEN on a pooled session.
func TestPgBouncerTransactionPoolingWithoutDirectURL(t *testing.T) {
	t.Parallel()
	b := setupTxPooler(t)
	const rows, updated = 4000, 300

	code, _, errOut := syncerCmd(t, "migrate", "--database-url", b.pooled)
	require.Equal(t, 0, code, "migrate: %s\npgbouncer:\n%s", errOut, b.pgb.Log())
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, rows)

	code, out, errOut := syncerCmd(t, "status", "--json", "--database-url", b.pooled)
	require.Equal(t, 0, code, "status: %s", errOut)
	var st struct{ Total, Unsynced int64 }
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, int64(rows), st.Total)

	args := []string{"--batch-size", "50", "--rate-limit", "8"}
	first, firstErr, second, secondErr := b.startHolderThenSecond(t, b.pooled, func() (int, bool) { return b.holder(t) }, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the first daemon's log:\n%s\nthe second's:\n%s", firstErr.String(), secondErr.String())
		}
	})
	waitFor(t, time.Minute, "mid-drain", func() bool { return b.fake.Stats().DistinctPairs >= 600 })
	advisory, listening := b.sessionState(t)
	require.Zero(t, advisory, "no session advisory lock on a pooled session")
	require.Zero(t, listening, "no LISTEN on a pooled session")

	require.NoError(t, first.Process.Signal(syscall.SIGSTOP))
	frozenAt := time.Now()
	waitFor(t, 45*time.Second, "the second daemon takes over", func() bool {
		pid, held := b.holder(t)
		return held && pid == second.Process.Pid
	})
	took := time.Since(frozenAt)
	t.Logf("transaction pooling without a direct URL: takeover %.1fs after the freeze", took.Seconds())
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
	code, out, errOut = syncerCmd(t, "replay", "--database-url", b.pooled, "--from-id", "1", "--to-id", "100", "--log-level", "error")
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
	_, held := b.holder(t)
	require.False(t, held, "the daemons released their leases as they stopped")

	// A configured source's destination, paused and resumed through the
	// pooler: nothing goes out while paused, everything after.
	dest := newDestination(t, fakethirdparty.Config{})
	cfgFile := b.installSlowOrders(t, dest)
	run, runErr := b.startRun(t, b.pooled, "--config", cfgFile)
	b.exec(t, `INSERT INTO orders SELECT g, 1 FROM generate_series(1, 40) g`)
	b.waitSourcesDrained(t, "orders")
	code, out, errOut = syncerCmd(t, "pause", "--destination", "crm", "--database-url", b.pooled)
	require.Equal(t, 0, code, "pause: %s", errOut)
	require.Contains(t, out, "destination crm paused")
	time.Sleep(2 * time.Second) // the daemon reads the shared facts every second
	sent := len(dest.fake.Deliveries())
	b.exec(t, `INSERT INTO orders SELECT g, 1 FROM generate_series(41, 60) g`)
	time.Sleep(3 * time.Second)
	require.Len(t, dest.fake.Deliveries(), sent, "nothing sent while paused")
	code, _, errOut = syncerCmd(t, "resume", "--destination", "crm", "--database-url", b.pooled)
	require.Equal(t, 0, code, "resume: %s", errOut)
	b.waitSourcesDrained(t, "orders")
	require.Len(t, byID(dest.fake), 60)
	requireOnceInOrder(t, dest.fake)
	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	require.NoError(t, run.Wait(), runErr.String())
}

// A tenant source of 4 lanes through PgBouncer in transaction mode without
// SYNCER_DIRECT_URL: every connected tenant's rows reach its own account,
// once and in order, the lanes' locks leases alone; the one connected
// last gets its rows too. The daemon holds no direct session at all.
func TestTenantsThroughTransactionPoolingWithoutDirectURL(t *testing.T) {
	t.Parallel()
	w := newTenantWorld(t, fakethirdparty.Config{})
	d, err := url.Parse(w.dsn)
	require.NoError(t, err)
	schema := d.Query().Get("search_path")
	role := dbtest.NewRole(t, schema)
	pgb := dbtest.StartPgBouncer(t, "transaction", role)
	u, err := url.Parse(pgb.URL(t, w.dsn))
	require.NoError(t, err)
	u.User = url.User(role)
	q := u.Query()
	q.Del("search_path")
	q.Del("application_name") // its sessions and leases named after the daemon's pid
	u.RawQuery = q.Encode()

	tenants := []string{"t1", "t2", "t3", "t4"}
	for _, tn := range tenants[:3] {
		w.exec(t, `INSERT INTO crm_connections VALUES ($1, 'tok-' || $1)`, tn)
	}
	cfg := w.config(t, w.fakeURL, 4)
	cmd := exec.Command(w.bin, "run", "--database-url", u.String(), "--config", cfg,
		"--thirdparty-url", w.fakeURL, "--http-addr", freePort(t), "--log-level", "warn")
	runErr := &dbtest.Buffer{}
	cmd.Stderr = runErr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s\nPgBouncer's:\n%s", runErr.String(), pgb.Log())
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
	var leases, direct int64
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM syncer_lock_leases WHERE holder IS NOT NULL AND expires_at > clock_timestamp()),
		(SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '% %:' || $1::text AND usename <> $2)`,
		strconv.Itoa(cmd.Process.Pid), role).Scan(&leases, &direct))
	t.Logf("without a direct URL: %d leases alone held, %d direct sessions", leases, direct)
	require.Positive(t, leases)
	require.Zero(t, direct, "no session of the daemon's but PgBouncer's")
	// status counts the daemon's leases alone among its locks.
	code, out, errOut := syncerCmd(t, "status", "--json", "--database-url", u.String())
	require.Equal(t, 0, code, "status: %s", errOut)
	var st struct {
		Sessions []struct{ Process, Locks int }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	var locksShown int
	for _, s := range st.Sessions {
		if s.Process == cmd.Process.Pid {
			locksShown = s.Locks
		}
	}
	require.Positive(t, locksShown, "status shows the daemon's leases: %s", out)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), runErr.String())
	require.NotContains(t, runErr.String(), "prepared statement")
}
