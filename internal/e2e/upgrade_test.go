package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// previousRelease is the commit the upgrade test starts from: main before
// the feed family (issue 34), with its three job kinds (syncer_sync,
// syncer_replay, syncer_source), replays run in jobs of their own, and a
// source's replay cursor in a table of its own. Move it forward when a
// release is cut.
const previousRelease = "9d20550"

// oldSyncerBinary builds syncer as it was at previousRelease
// (releaseBinary).
func oldSyncerBinary(t *testing.T) string {
	t.Helper()
	return releaseBinary(t, previousRelease).bin
}

// upgradeRun is the database and the two third parties of the upgrade
// test, and the daemons it started.
type upgradeRun struct {
	dsn     string
	pool    *pgxpool.Pool
	cfgPath string
	res     *fakethirdparty.Server // resources' destination
	resURL  string
	orders  *destination // the orders source's destination
	logs    *bytes.Buffer
	logMu   sync.Mutex
}

func (u *upgradeRun) logWriter(name string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		u.logMu.Lock()
		defer u.logMu.Unlock()
		for _, line := range bytes.SplitAfter(p, []byte("\n")) {
			if len(line) > 0 {
				fmt.Fprintf(u.logs, "%s: %s", name, line)
			}
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// command runs bin to completion with the run's database and config.
func (u *upgradeRun) command(t *testing.T, bin string, args ...string) string {
	t.Helper()
	args = append(args, "--database-url", u.dsn, "--config", u.cfgPath, "--log-level", "error")
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", filepath.Base(bin), args, out)
	return string(out)
}

// start starts `bin run` as its own process, killed when the test ends.
func (u *upgradeRun) start(t *testing.T, bin, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "run", "--database-url", u.dsn, "--config", u.cfgPath,
		"--thirdparty-url", u.resURL, "--batch-size", "50", "--http-addr", freePort(t), "--log-level", "info")
	cmd.Stdout, cmd.Stderr = io.Discard, u.logWriter(name)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func kill(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

func (u *upgradeRun) scalar(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, u.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (u *upgradeRun) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := u.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// Issue 34, upgrade in place: a database migrated and worked by the
// previous release's binary, left with rows pending, a source with pending
// changes, batches recorded in flight (its daemon killed mid-batch against
// a slow third party), replays running and a learnt rate, is migrated by
// this release's `migrate` while a daemon of the previous release still
// runs; then daemons of this release take over. Every row's last version
// arrives; no (id, version) is accepted under two keys; no key comes with
// two bodies.
func TestUpgradeInPlaceFromPreviousRelease(t *testing.T) {
	t.Parallel()
	oldBin, newBin := oldSyncerBinary(t), syncerBinary(t)
	ctx := context.Background()

	dsn, _ := dbtest.NewSchema(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	res := fakethirdparty.New(fakethirdparty.Config{})
	srv := httptest.NewServer(res)
	t.Cleanup(srv.Close)
	u := &upgradeRun{dsn: dsn, pool: pool, res: res, resURL: srv.URL,
		orders: newDestination(t, fakethirdparty.Config{}), logs: &bytes.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			u.logMu.Lock()
			t.Logf("daemons' logs:\n%s", u.logs.String())
			u.logMu.Unlock()
		}
	})
	var left string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("left when the test failed: %s", left)
			rows, err := pool.Query(context.Background(), `SELECT kind, state, args::text, attempt, coalesce(errors::text, ''), scheduled_at FROM river_job WHERE state <> 'completed' ORDER BY id`)
			if err == nil {
				for rows.Next() {
					var kind, state, args, errs string
					var attempt int
					var at time.Time
					_ = rows.Scan(&kind, &state, &args, &attempt, &errs, &at)
					t.Logf("river_job %s %s %s attempt %d scheduled %s errors %.300s", kind, state, args, attempt, at.Format(time.RFC3339), errs)
				}
				rows.Close()
			}
		}
	})
	u.cfgPath = filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(u.cfgPath, fmt.Appendf(nil,
		"destinations:\n  crm:\n    url: %s\nsources:\n  - table: orders\n    key: id\n    columns: [status, total]\n    destination: crm\n    batch_size: 50\n",
		u.orders.url), 0o600))

	// 1. The previous release installs and exports a first lot, fast.
	const delivered, deliveredOrders = 1000, 400
	u.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, total int NOT NULL)`)
	u.command(t, oldBin, "migrate")
	u.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, delivered)
	u.exec(t, `INSERT INTO orders SELECT g, 'new', g FROM generate_series(1, $1) g`, deliveredOrders)
	old := u.start(t, oldBin, "old-1")
	waitFor(t, 2*time.Minute, "the previous release's first export", func() bool {
		return len(res.Latest()) == delivered && len(u.orders.fake.Latest()) == deliveredOrders &&
			u.scalar(t, `SELECT count(*) FROM syncer_changes`) == 0
	})
	require.NoError(t, old.Process.Signal(syscall.SIGTERM))
	require.NoError(t, old.Wait())
	// From here on every acceptance counts: a pair accepted before and
	// again under another key would be a loss of the promise too, but the
	// replays below resend those rows on purpose, under keys of their own.
	res.Reset()
	u.orders.fake.Reset()

	// 2. Work left for the upgrade: pending rows and changes, replays of
	// the first lot, a slow third party that teaches a lower rate.
	const pending, pendingOrders = 3000, 600
	u.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, pending)
	u.exec(t, `INSERT INTO orders SELECT g, 'new', g FROM generate_series($1::int + 1, $1::int + $2::int) g`, deliveredOrders, pendingOrders)
	u.exec(t, `UPDATE orders SET status = 'paid' WHERE id > 200 AND id <= $1`, deliveredOrders)
	u.command(t, oldBin, "replay", "--from-id", "1", "--to-id", fmt.Sprint(delivered))
	u.command(t, oldBin, "replay", "--source", "orders", "--from-key", "1", "--to-key", "200")
	slow := fakethirdparty.Config{Latency: 250 * time.Millisecond, UnannouncedLimit: 6, UnannouncedBurst: 2}
	res.SetConfig(slow)
	u.orders.fake.SetConfig(slow)
	old = u.start(t, oldBin, "old-2")
	inflight := func() int64 { return u.scalar(t, `SELECT count(*) FROM syncer_batches`) }
	waitFor(t, 2*time.Minute, "batches in flight and a rate learnt", func() bool {
		return res.Stats().ItemsAccepted >= 300 && inflight() > 0 &&
			u.scalar(t, `SELECT count(*) FROM syncer_state WHERE key LIKE '%rate'`) > 0 &&
			res.Stats().RequestsByStatus["429"] > 0
	})
	kill(old)
	inflightAtKill := inflight()
	require.Positive(t, inflightAtKill, "batches recorded in flight when the old daemon died")
	require.Positive(t, u.scalar(t, `SELECT count(*) FROM syncer_replays WHERE state IN ('pending', 'running')`), "replays still running")
	rates := map[string]string{}
	rs, err := pool.Query(ctx, `SELECT key, convert_from(value, 'UTF8') FROM syncer_state WHERE key LIKE '%rate'`)
	require.NoError(t, err)
	for rs.Next() {
		var k, v string
		require.NoError(t, rs.Scan(&k, &v))
		rates[k] = v
	}
	require.NoError(t, rs.Err())
	t.Logf("rates learnt by the previous release: %v", rates)

	// 3. A daemon of the previous release runs again (it resends what was
	// in flight) while this release's migrate runs under it; writes go on.
	// Only what it sends in all is waited for.
	accepted := func() int64 { return res.Stats().ItemsAccepted + u.orders.fake.Stats().ItemsAccepted }
	old = u.start(t, oldBin, "old-3")
	at := accepted()
	waitFor(t, time.Minute, "the old daemon working again", func() bool { return accepted() >= at+100 })
	pendingBefore := u.scalar(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL`)
	changesBefore := u.scalar(t, `SELECT count(DISTINCT key) FROM syncer_changes`)
	inflightAtMigrate := inflight()
	out := u.command(t, newBin, "migrate")
	t.Logf("this release's migrate under the old daemon: %s", strings.TrimSpace(out))
	u.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('late', g) FROM generate_series(1, 200) g`)
	u.exec(t, `UPDATE orders SET total = total + 1 WHERE id > $1 AND id <= $1 + 100`, deliveredOrders)
	// Rows of the replayed range stay as they are: a replay resends on
	// purpose, and a change of the same row would go twice legitimately.
	u.exec(t, `UPDATE resources SET payload = payload || '{"v": 2}' WHERE id > $1 AND id % 10 = 0`, delivered)
	at = accepted()
	waitFor(t, time.Minute, "the old daemon working on the new schema", func() bool { return accepted() >= at+100 })
	kill(old)
	for k := range rates {
		var now []byte
		require.NoError(t, pool.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1`, k).Scan(&now))
		require.NotEmpty(t, now, "learnt rate %s kept", k)
	}
	st, err := breakerstore.ReadStateOf(ctx, pool, "")
	require.NoError(t, err)
	t.Logf("learnt rate of resources' destination as this release reads it: %+v", st.Rate)

	// 4. Two daemons of this release take over; the third parties heal.
	res.SetConfig(fakethirdparty.Config{Latency: 5 * time.Millisecond})
	u.orders.fake.SetConfig(fakethirdparty.Config{Latency: 5 * time.Millisecond})
	u.start(t, newBin, "new-1")
	u.start(t, newBin, "new-2")
	waitFor(t, 3*time.Minute, "everything delivered", func() bool {
		var unsynced, changes, batches, replays int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM resources WHERE synced_at IS NULL),
			(SELECT count(*) FROM syncer_changes),
			(SELECT count(*) FROM syncer_batches),
			(SELECT count(*) FROM syncer_replays WHERE state IN ('pending', 'running'))`).Scan(&unsynced, &changes, &batches, &replays))
		left = fmt.Sprintf("%d rows unsynced, %d changes, %d batches in flight, %d replays running", unsynced, changes, batches, replays)
		return unsynced+changes+batches+replays == 0
	})

	// Every row's last version arrived.
	latest := res.Latest()
	rows, err := pool.Query(ctx, `SELECT id, version FROM resources`)
	require.NoError(t, err)
	var total, deliveredAfter int64
	for rows.Next() {
		var id, version int64
		require.NoError(t, rows.Scan(&id, &version))
		total++
		if id > delivered && latest[id] == version {
			deliveredAfter++
		}
		if id <= delivered && version == 1 {
			require.Equal(t, version, latest[id], "replayed row %d", id)
		}
		if id > delivered {
			require.Equal(t, version, latest[id], "row %d's last version", id)
		}
	}
	require.NoError(t, rows.Err())
	payloads := u.orders.payloads(t)
	orows, err := pool.Query(ctx, `SELECT id, json_build_object('status', status, 'total', total)::text FROM orders`)
	require.NoError(t, err)
	var ordersDelivered int64
	for orows.Next() {
		var id int64
		var want string
		require.NoError(t, orows.Scan(&id, &want))
		// 1-200 replayed, 201-400 changed, the rest new.
		got, ok := payloads[fmt.Sprint(id)]
		require.True(t, ok, "order %d delivered", id)
		require.JSONEq(t, want, string(got), "order %d's last version", id)
		ordersDelivered++
	}
	require.NoError(t, orows.Err())

	rst, ost := res.Stats(), u.orders.fake.Stats()
	t.Logf("upgrade from %s: resources pending before migrate %d, source keys pending %d, batches in flight at the kill %d (at migrate %d)",
		previousRelease, pendingBefore, changesBefore, inflightAtKill, inflightAtMigrate)
	t.Logf("delivered after: %d of %d new rows at their last version (%d rows in all), %d orders; replays: %d resources rows",
		deliveredAfter, pending+200, total, ordersDelivered, delivered)
	t.Logf("pairs under two keys: resources %d, orders %d; key-body conflicts: %d, %d; key conflicts: %d, %d; out of order: %d, %d; key replays: %d, %d",
		rst.DuplicatesOtherKey, ost.DuplicatesOtherKey, rst.KeyBodyConflicts, ost.KeyBodyConflicts,
		rst.KeyConflicts, ost.KeyConflicts, rst.OutOfOrder, ost.OutOfOrder, rst.KeyReplays, ost.KeyReplays)
	require.Equal(t, int64(pending+200), deliveredAfter)
	require.Zero(t, rst.DuplicatesOtherKey, "resources: a pair under two keys")
	require.Zero(t, ost.DuplicatesOtherKey, "orders: a pair under two keys")
	require.Zero(t, rst.KeyBodyConflicts, "resources: a key with two bodies")
	require.Zero(t, ost.KeyBodyConflicts, "orders: a key with two bodies")
	require.Zero(t, rst.KeyConflicts+ost.KeyConflicts, "a key reused for other pairs")
	require.Zero(t, rst.OutOfOrder+ost.OutOfOrder, "versions out of order")
}
