package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

// item is what the third party was sent, in arrival order.
type item struct {
	id, version int64
	deleted     bool
}

// recorder stands in front of the fake and notes every item of every batch
// (the fake counts pairs; tombstones are told apart here), then lets the
// fake answer.
type recorder struct {
	fake *fakethirdparty.Server
	mu   sync.Mutex
	sent []item
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if items, err := thirdparty.DecodeBatch(body); err == nil {
		r.mu.Lock()
		for _, it := range items {
			id, err := strconv.ParseInt(it.ID, 10, 64)
			if err != nil {
				continue // not a row of resources
			}
			r.sent = append(r.sent, item{id, it.Version, it.Deleted})
		}
		r.mu.Unlock()
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.fake.ServeHTTP(w, req)
}

// of returns what was sent for id, in order.
func (r *recorder) of(id int64) []item {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []item
	for _, it := range r.sent {
		if it.id == id {
			out = append(out, it)
		}
	}
	return out
}

func (r *recorder) tombstones() map[int64]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]int64{}
	for _, it := range r.sent {
		if it.deleted {
			out[it.id] = it.version
		}
	}
	return out
}

// setupRecorded is setup with the recorder in front of the fake.
func setupRecorded(t *testing.T, fakeCfg fakethirdparty.Config) (*bundle, *recorder) {
	t.Helper()
	dsn, _ := dbtest.NewSchema(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.Up(ctx, pool, nil)
	require.NoError(t, err)
	rec := &recorder{fake: fakethirdparty.New(fakeCfg)}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return &bundle{pool: pool, dsn: dsn, fake: rec.fake, fakeURL: srv.URL}, rec
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func (b *bundle) scalar(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// waitAllSynced waits until no row or tombstone is left to send.
func (b *bundle) waitAllSynced(t *testing.T, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "rows and tombstones synced", func() bool {
		any, err := resources.AnyPending(context.Background(), b.pool)
		require.NoError(t, err)
		return !any
	})
}

// requireVersionsIncrease checks the contract's order per id and that the
// third party accepted nothing twice.
func requireVersionsIncrease(t *testing.T, b *bundle) {
	t.Helper()
	st := b.fake.Stats()
	require.Zero(t, st.OutOfOrder, "versions of one id only increase")
	require.Zero(t, st.DuplicatePairs, "no (id, version) accepted twice")
}

func TestTombstoneAfterExportAndUpdateThenDelete(t *testing.T) {
	t.Parallel()
	b, rec := setupRecorded(t, fakethirdparty.Config{})
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, '{}' FROM generate_series(1, 20) g`)
	b.startDaemon(t, nil)
	b.waitAllSynced(t, 30*time.Second)

	// 1-10 deleted after export, in one statement; 11 changed twice and
	// deleted in one transaction, before the new versions could go.
	b.exec(t, `DELETE FROM resources WHERE id <= 10`)
	b.exec(t, `BEGIN; UPDATE resources SET payload = '{"v": 2}' WHERE id = 11;
		UPDATE resources SET payload = '{"v": 3}' WHERE id = 11; DELETE FROM resources WHERE id = 11; COMMIT`)
	b.waitAllSynced(t, 30*time.Second)

	tomb := rec.tombstones()
	for id := int64(1); id <= 10; id++ {
		require.Equal(t, int64(2), tomb[id], "id %d", id)
	}
	require.Equal(t, []item{{11, 1, false}, {11, 4, true}}, rec.of(11), "only the tombstone after the first version")
	require.Len(t, tomb, 11)
	requireVersionsIncrease(t, b)
	r := b.report(t)
	require.Zero(t, r.Unsynced)
	require.Equal(t, int64(9), r.Total)
}

func TestTombstoneOfRowsDeletedWhileStoppedAndRolledBackDelete(t *testing.T) {
	t.Parallel()
	b, rec := setupRecorded(t, fakethirdparty.Config{})
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, '{}' FROM generate_series(1, 50) g`)
	d := b.startDaemon(t, nil)
	b.waitAllSynced(t, 30*time.Second)
	require.NoError(t, d.stop())

	b.exec(t, `DELETE FROM resources WHERE id > 40`)
	b.exec(t, `BEGIN; DELETE FROM resources WHERE id <= 5; ROLLBACK`)
	// No daemon: the gate's lease lapses, no event waits in the outbox for
	// a daemon that may never come.
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM syncer_gate WHERE lease_until > now()`) == 0
	}, time.Minute, 100*time.Millisecond)
	before := b.scalar(t, `SELECT count(*) FROM syncer_outbox`)
	b.exec(t, `DELETE FROM resources WHERE id = 40`)
	require.Equal(t, before, b.scalar(t, `SELECT count(*) FROM syncer_outbox`))

	b.startDaemon(t, nil)
	b.waitAllSynced(t, 30*time.Second)
	tomb := rec.tombstones()
	require.Len(t, tomb, 11, "ids 40-50, sent by the next daemon from the table itself")
	for id := int64(1); id <= 5; id++ {
		require.Equal(t, []item{{id, 1, false}}, rec.of(id), "a rolled-back delete sends nothing")
	}
	requireVersionsIncrease(t, b)
}

func TestDeletedIDComesBackAboveItsTombstone(t *testing.T) {
	t.Parallel()
	b, rec := setupRecorded(t, fakethirdparty.Config{})
	b.startDaemon(t, nil)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (7, '{"life": 1}'), (8, '{"life": 1}')`)
	b.waitAllSynced(t, 30*time.Second)

	// 7: deleted, its tombstone sent, then back. 8: deleted and back in
	// one transaction, the tombstone never sent.
	b.exec(t, `DELETE FROM resources WHERE id = 7`)
	b.waitAllSynced(t, 30*time.Second)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (7, '{"life": 2}')`)
	b.exec(t, `BEGIN; DELETE FROM resources WHERE id = 8; INSERT INTO resources (id, payload) VALUES (8, '{"life": 2}'); COMMIT`)
	b.waitAllSynced(t, 30*time.Second)

	require.Equal(t, []item{{7, 1, false}, {7, 2, true}, {7, 3, false}}, rec.of(7))
	require.Equal(t, []item{{8, 1, false}, {8, 3, false}}, rec.of(8))
	require.Equal(t, map[int64]int64{7: 3, 8: 3}, b.fake.Latest())
	requireVersionsIncrease(t, b)
}

func TestTombstonesPurgedAfterRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := setupRecorded(t, fakethirdparty.Config{})
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, '{}' FROM generate_series(1, 30) g`)
	b.startDaemon(t, nil)
	b.waitAllSynced(t, 30*time.Second)
	b.exec(t, `DELETE FROM resources WHERE id <= 20`)
	b.waitAllSynced(t, 30*time.Second)
	require.Equal(t, int64(20), b.scalar(t, `SELECT count(*) FROM syncer_tombstones WHERE synced_at IS NOT NULL`))

	p, err := resources.NewPurger(b.pool, &resources.PurgerConfig{Retention: time.Hour, Batch: 7})
	require.NoError(t, err)
	n, err := p.Round(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "kept within the retention")
	b.exec(t, `UPDATE syncer_tombstones SET synced_at = synced_at - interval '2 hours' WHERE id <= 15`)
	n, err = p.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(15), n)
	require.Equal(t, int64(5), b.scalar(t, `SELECT count(*) FROM syncer_tombstones`))
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// syncerBinary builds the syncer binary once for the package.
func syncerBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "syncer-e2e-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "syncer")
		out, err := exec.Command("go", "build", "-o", binaryPath, "github.com/syncer-dev/syncer/cmd/syncer").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binaryErr)
	return binaryPath
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestSIGKILLMidBurstOfDeletes kills the daemon while a burst of deletes
// is being exported: after a restart every tombstone arrives, none is
// accepted twice under two keys.
func TestSIGKILLMidBurstOfDeletes(t *testing.T) {
	t.Parallel()
	bin := syncerBinary(t)
	b, rec := setupRecorded(t, fakethirdparty.Config{Latency: 5 * time.Millisecond})
	const rows = 20000
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, jsonb_build_object('n', g) FROM generate_series(1, $1) g`, rows)
	b.exec(t, `UPDATE resources SET synced_at = now()`)

	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--database-url", b.dsn, "--thirdparty-url", b.fakeURL,
			"--http-addr", freePort(t), "--batch-size", "200", "--log-level", "error")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	cmd := start()
	// The burst: many single statements, as an application deletes.
	var wg sync.WaitGroup
	wg.Go(func() {
		for lo := 1; lo <= rows; lo += 100 {
			if _, err := b.pool.Exec(context.Background(), `DELETE FROM resources WHERE id BETWEEN $1 AND $2`, lo, lo+99); err != nil {
				return
			}
		}
	})
	for _, at := range []int{3000, 9000} {
		waitFor(t, time.Minute, "tombstones arriving", func() bool { return len(rec.tombstones()) >= at })
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		cmd = start()
	}
	wg.Wait()
	b.waitAllSynced(t, 2*time.Minute)

	require.Len(t, rec.tombstones(), rows)
	st := b.fake.Stats()
	require.Zero(t, st.DuplicatesOtherKey, "no tombstone accepted under two keys")
	requireVersionsIncrease(t, b)
}

// Tombstones are marked by statements of their own; a 2xx that is not the
// contract's answer must mark none of them, and once the third party heals
// each goes once, under the key it was first sent with.
func TestHostileAnswersMarkNoTombstone(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		fakethirdparty.BadAnswerHTML, fakethirdparty.BadAnswerUnknownStatus, fakethirdparty.BadAnswerUnknownID,
	} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			b, rec := setupRecorded(t, fakethirdparty.Config{})
			b.exec(t, `INSERT INTO resources (id, payload) SELECT g, '{}' FROM generate_series(1, 30) g`)
			b.startDaemon(t, func(c *daemon.Config) {
				c.Exporter.BatchSize = 10
				c.Delivery.BackoffInitial = 20 * time.Millisecond
				c.Delivery.BackoffMax = 100 * time.Millisecond
				c.Delivery.BreakerOpenTimeout = 300 * time.Millisecond
			})
			b.waitAllSynced(t, 30*time.Second)

			b.fake.SetConfig(fakethirdparty.Config{BadAnswer: bad})
			before := b.fake.Stats().BadAnswers
			b.exec(t, `DELETE FROM resources`)
			waitFor(t, 30*time.Second, "bad answers", func() bool { return b.fake.Stats().BadAnswers >= before+4 })
			require.Zero(t, b.scalar(t, `SELECT count(*) FROM syncer_tombstones WHERE synced_at IS NOT NULL`),
				"a 2xx that is not the contract's answer accepts no tombstone")
			require.Zero(t, b.scalar(t, `SELECT count(*) FROM syncer_tombstones WHERE failed_at IS NOT NULL`))

			b.fake.SetConfig(fakethirdparty.Config{})
			b.waitAllSynced(t, time.Minute)
			require.Len(t, rec.tombstones(), 30)
			require.Equal(t, int64(30), b.scalar(t, `SELECT count(*) FROM syncer_tombstones WHERE synced_at IS NOT NULL`))
			require.Zero(t, b.fake.Stats().DuplicatesOtherKey, "retried under the same keys")
			requireVersionsIncrease(t, b)
		})
	}
}
