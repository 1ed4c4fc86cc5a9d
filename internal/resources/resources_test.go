package resources_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/resources"
)

type bundle struct {
	pool *pgxpool.Pool
}

// setup returns a pool on a fresh migrated schema.
func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{pool: dbtest.NewMigrated(t).Pool}
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (b *bundle) pending(t *testing.T, lim feed.Limits) []resources.Row {
	t.Helper()
	p, err := resources.Pending(context.Background(), b.pool, resources.Start, lim, nil)
	require.NoError(t, err)
	return p.Rows
}

// drain reads every pending batch without marking, as a pass does, and
// checks that a page that says it reached the end is followed by nothing
// (no test writes while it drains), and that a short last page without a
// byte limit says so.
func (b *bundle) drain(t *testing.T, lim feed.Limits) [][]resources.Row {
	t.Helper()
	var out [][]resources.Row
	after, end := resources.Start, false
	for {
		p, err := resources.Pending(context.Background(), b.pool, after, lim, nil)
		require.NoError(t, err)
		if len(p.Rows) == 0 {
			require.True(t, p.End, "an empty read is the end")
			if n := len(out); n > 0 && len(out[n-1]) < lim.Items && lim.Bytes == feed.BytesDefault {
				require.True(t, end, "a short last page says it reached the end")
			}
			return out
		}
		require.False(t, end, "a page said it reached the end, and the next read found rows")
		end = p.End
		out = append(out, p.Rows)
		after = p.Rows[len(p.Rows)-1].ID
	}
}

func versions(rows ...resources.Row) resources.Versions {
	var v resources.Versions
	for _, r := range rows {
		v.Add(r.ID, r.Version)
	}
	return v
}

var lim = feed.Limits{Items: 10}.WithDefaults()

func TestPendingPassesPayloadsThroughAndMarksExactVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{"a": "é", "b": [1, 2.5, null]}'), ('"plain"'), ('{"big": "x"}')`)

	p, err := resources.Pending(ctx, b.pool, resources.Start, lim, nil)
	require.NoError(t, err)
	rows := p.Rows
	require.Zero(t, p.Gen)
	require.Len(t, rows, 3)
	for _, r := range rows {
		var want string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT payload::text FROM resources WHERE id = $1`, r.ID).Scan(&want))
		require.Equal(t, want, string(r.Payload))
		require.False(t, r.Deleted)
		require.Zero(t, r.Oversize)
	}

	// A byte limit cuts the batch but never below one row.
	require.Len(t, b.pending(t, feed.Limits{Items: 10, Bytes: 1}.WithDefaults()), 1)

	// A page says it reached the end only when no limit left a row out.
	require.True(t, p.End, "3 rows under a limit of 10")
	for _, l := range []feed.Limits{{Items: 10, Bytes: 1}, {Items: 3}, {Items: 2}} {
		p, err := resources.Pending(ctx, b.pool, resources.Start, l.WithDefaults(), nil)
		require.NoError(t, err)
		require.False(t, p.End, "limits %+v", l)
	}

	b.captured(t, rows)

	// Row 1 changes while "in flight": its mark must not apply.
	var updated time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `UPDATE resources SET payload = '{"a": 2}' WHERE id = $1 RETURNING now()`, rows[0].ID).Scan(&updated))
	n, err := resources.MarkSynced(ctx, b.pool, versions(rows...))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	left := b.pending(t, lim)
	require.Len(t, left, 1)
	require.Equal(t, rows[0].ID, left[0].ID)
	require.Equal(t, int64(2), left[0].Version)
	require.True(t, updated.Equal(left[0].Captured), "captured when the update's transaction began: %v, not %v", updated, left[0].Captured)
}

func TestEveryBigintIDIsExported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := []int64{math.MinInt64, math.MinInt64 + 1, -5, 0, 7, math.MaxInt64}
	for _, id := range ids {
		b.exec(t, `INSERT INTO resources (id, payload) VALUES ($1, '{}')`, id)
	}
	var got []int64
	for _, batch := range b.drain(t, feed.Limits{Items: 2}.WithDefaults()) {
		for _, r := range batch {
			got = append(got, r.ID)
		}
	}
	require.Equal(t, ids, got, "all found, in order, across batches")

	n, err := resources.Count(ctx, b.pool, resources.Filter{FromID: -10, ToID: -1})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = resources.Count(ctx, b.pool, resources.Filter{})
	require.NoError(t, err)
	require.Equal(t, int64(len(ids)), n)

	// Replayable, synced or not, and counted.
	all := b.pending(t, feed.Limits{Items: 100}.WithDefaults())
	_, err = resources.MarkFailed(ctx, b.pool, versions(all[:3]...), []string{"a", "b", "c"})
	require.NoError(t, err)
	_, err = resources.MarkSynced(ctx, b.pool, versions(all[3:]...))
	require.NoError(t, err)
	replay, err := resources.Matching(ctx, b.pool, resources.Filter{ToID: -1}, resources.Start, feed.Limits{Items: 100}.WithDefaults(), nil)
	require.NoError(t, err)
	require.Len(t, replay, 3)
	replay, err = resources.Matching(ctx, b.pool, resources.Filter{FailedOnly: true}, resources.Start, feed.Limits{Items: 100}.WithDefaults(), nil)
	require.NoError(t, err)
	require.Len(t, replay, 3)
	c, err := resources.CountAll(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, resources.Counts{Total: 6, Synced: 3, Unsynced: 3, Failed: 3}, c)
	n, err = resources.RetryFailed(ctx, b.pool, nil)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.Len(t, b.pending(t, feed.Limits{Items: 100}.WithDefaults()), 3)
}

// payloadBytes is what a batch holds in memory.
func payloadBytes(rows []resources.Row) int {
	n := 0
	for _, r := range rows {
		n += len(r.Payload)
	}
	return n
}

func TestHugeRowsKeepBatchesBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Small rows around: a 64 MiB row (compressible, so stored small: only
	// its text length tells), an 8 MiB row that cannot be compressed, and
	// a 3 MiB one.
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, jsonb_build_object('n', g) FROM generate_series(1, 50) g WHERE g NOT IN (20, 30, 40)`)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (20, jsonb_build_object('big', repeat('x', 64 << 20)))`)
	b.exec(t, `INSERT INTO resources (id, payload) SELECT 30, jsonb_build_object('rnd',
		(SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, (8 << 20) / 32) g))`)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (40, jsonb_build_object('mid', repeat('y', 3 << 20)))`)
	var big, rnd int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT octet_length(payload::text) FROM resources WHERE id = 20`).Scan(&big))
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT octet_length(payload::text) FROM resources WHERE id = 30`).Scan(&rnd))

	const limit = 1 << 20
	lim := feed.Limits{Items: 500, Bytes: limit, MaxItemBytes: 4 << 20}.WithDefaults()
	batches := b.drain(t, lim)
	seen := map[int64]resources.Row{}
	for _, batch := range batches {
		if len(batch) > 1 {
			require.LessOrEqual(t, payloadBytes(batch), limit, "a batch of several rows stays within the limit")
		}
		require.LessOrEqual(t, payloadBytes(batch), 4<<20, "no batch holds more than one item's cap")
		for _, r := range batch {
			seen[r.ID] = r
		}
	}
	require.Len(t, seen, 50, "every row comes, the small ones after the big ones too")
	require.Nil(t, seen[20].Payload)
	require.Equal(t, big, seen[20].Oversize, "oversize rows carry their size, not their payload")
	require.Nil(t, seen[30].Payload)
	require.InEpsilon(t, rnd, seen[30].Oversize, 0.01, "uncompressed: jsonb's stored size, within a few bytes of the text's")
	require.Len(t, seen[40].Payload, 3<<20+len(`{"mid": ""}`), "a row above Bytes but under the cap goes, alone")
	for _, batch := range batches {
		for _, r := range batch {
			if r.ID == 40 {
				require.Len(t, batch, 1)
			}
		}
	}
	require.Len(t, seen[41].Payload, len(`{"n": 41}`))
	require.Less(t, len(batches), 12, "small rows still share batches")

	// The same bounds for a replay.
	rows, err := resources.Matching(ctx, b.pool, resources.Filter{FromID: 15, ToID: 25}, resources.Start, lim, nil)
	require.NoError(t, err)
	require.Len(t, rows, 11)
	require.Equal(t, big, rows[5].Oversize)
}

func TestTombstones(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, '{}' FROM generate_series(1, 6) g`)
	require.NoError(t, func() error { _, err := resources.MarkSynced(ctx, b.pool, versions(b.pending(t, lim)...)); return err }())

	// 2: deleted after export. 3: updated twice, then deleted before the
	// new versions went out: only the tombstone goes. 4: deleted in a
	// transaction that rolls back. 5: deleted, then brought back.
	var deleted time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `DELETE FROM resources WHERE id = 2 RETURNING now()`).Scan(&deleted))
	b.exec(t, `UPDATE resources SET payload = '{"v": 2}' WHERE id = 3`)
	b.exec(t, `UPDATE resources SET payload = '{"v": 3}' WHERE id = 3`)
	b.exec(t, `DELETE FROM resources WHERE id = 3`)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `DELETE FROM resources WHERE id = 4`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	b.exec(t, `DELETE FROM resources WHERE id = 5`)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (7, '{}')`)

	got := b.pending(t, lim)
	require.True(t, deleted.Equal(got[0].Captured), "a tombstone captured when the delete's transaction began: %v, not %v", deleted, got[0].Captured)
	require.Equal(t, []resources.Row{
		{ID: 2, Version: 2, Deleted: true},
		{ID: 3, Version: 4, Deleted: true},
		{ID: 5, Version: 2, Deleted: true},
		{ID: 7, Version: 1, Payload: []byte(`{}`)},
	}, b.captured(t, got))

	// Back again before its tombstone went: the tombstone goes, the row
	// continues above it.
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (5, '{"back": 1}')`)
	got = b.captured(t, b.pending(t, lim))
	require.Len(t, got, 4)
	require.Equal(t, resources.Row{ID: 5, Version: 3, Payload: []byte(`{"back": 1}`)}, got[2])
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_tombstones WHERE id = 5`))

	// Marks apply to tombstones as to rows, by exact version.
	n, err := resources.MarkSynced(ctx, b.pool, versions(got[0], resources.Row{ID: 3, Version: 3}))
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "a version a tombstone does not have marks nothing")
	n, err = resources.MarkFailed(ctx, b.pool, versions(got[1]), []string{"gone already"})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	got = b.pending(t, lim)
	require.Len(t, got, 2)

	c, err := resources.CountAll(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, int64(5), c.Total, "rows 1, 4, 5, 6 and 7")
	require.Equal(t, int64(1), c.TombstonesFailed)
	require.Zero(t, c.TombstonesPending)
	require.Equal(t, int64(3), c.Unsynced, "rows 5 and 7, and the failed tombstone")
	require.Equal(t, int64(1), c.Failed)
	fails, err := resources.RecentFailures(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Len(t, fails, 1)
	require.Equal(t, int64(3), fails[0].ID)

	// A failed tombstone is replayed by --failed and retried.
	rows, err := resources.Matching(ctx, b.pool, resources.Filter{FailedOnly: true}, resources.Start, lim, nil)
	require.NoError(t, err)
	require.Equal(t, []resources.Row{{ID: 3, Version: 4, Deleted: true}}, b.captured(t, rows), "a replay's rows come with their capture time too")
	cnt, err := resources.Count(ctx, b.pool, resources.Filter{FromID: 1, ToID: 3})
	require.NoError(t, err)
	require.Equal(t, int64(3), cnt, "row 1 and the tombstones of 2 and 3")
	n, err = resources.RetryFailed(ctx, b.pool, []int64{3})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, int64(1), b.count(t, `SELECT live FROM syncer_generation`))
	require.Len(t, b.pending(t, lim), 3)

	// Deleted again after coming back: the tombstone continues above.
	b.exec(t, `DELETE FROM resources WHERE id = 5`)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (5, '{}')`)
	b.exec(t, `DELETE FROM resources WHERE id = 5`)
	require.Equal(t, int64(6), b.count(t, `SELECT version FROM syncer_tombstones WHERE id = 5`), "3, tombstone 4, back at 5, tombstone 6")
}

func TestDeletingManyRowsIsOneStatementOfWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (payload) SELECT '{}' FROM generate_series(1, 100000)`)
	b.exec(t, `DELETE FROM syncer_outbox`)
	b.exec(t, `DELETE FROM resources`)
	require.Equal(t, int64(100000), b.count(t, `SELECT count(*) FROM syncer_tombstones WHERE version = 2`))
	require.LessOrEqual(t, b.count(t, `SELECT count(*) FROM syncer_outbox`), int64(1), "one event per statement at most")
}

func TestTruncateIsRefusedWithWhatToDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	_, err := b.pool.Exec(ctx, `TRUNCATE resources`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Contains(t, pgErr.Message, "without telling the third party")
	require.Contains(t, pgErr.Hint, "DELETE FROM resources")
	require.Contains(t, pgErr.Hint, "syncer.allow_truncate")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM resources`))

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL syncer.allow_truncate = on`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `TRUNCATE resources`)
		return err
	}))
	require.Zero(t, b.count(t, `SELECT count(*) FROM resources`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_tombstones`))
}

func TestPurgeKeepsWhatIsDueAndNeverWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, '{}' FROM generate_series(1, 30) g`)
	b.exec(t, `DELETE FROM resources`)
	// 1-20 synced 8 days ago, 21-25 an hour ago, 26-28 failed, 29-30
	// pending.
	b.exec(t, `UPDATE syncer_tombstones SET synced_at = now() - interval '8 days' WHERE id <= 20`)
	b.exec(t, `UPDATE syncer_tombstones SET synced_at = now() - interval '1 hour' WHERE id BETWEEN 21 AND 25`)
	b.exec(t, `UPDATE syncer_tombstones SET failed_at = now() - interval '30 days' WHERE id BETWEEN 26 AND 28`)

	// A writer holds one of the due tombstones: the purge skips it.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM syncer_tombstones WHERE id = 1 FOR UPDATE`)
	require.NoError(t, err)

	p, err := resources.NewPurger(b.pool, &resources.PurgerConfig{Batch: 3})
	require.NoError(t, err)
	n, err := p.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(19), n)
	require.NoError(t, tx.Rollback(ctx))
	n, err = resources.PurgeTombstones(ctx, b.pool, resources.TombstoneRetentionDefault, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, int64(10), b.count(t, `SELECT count(*) FROM syncer_tombstones`))

	_, err = resources.NewPurger(b.pool, &resources.PurgerConfig{Retention: -time.Second})
	require.ErrorContains(t, err, "Retention")
}

func TestGaugesNeverScanTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 200000) g`)
	b.exec(t, `UPDATE resources SET synced_at = now() WHERE id % 4 <> 0`)
	b.exec(t, `UPDATE resources SET failed_at = now() WHERE id % 100 = 0`)
	b.exec(t, `DELETE FROM resources WHERE id % 1000 = 1`)
	b.exec(t, `ANALYZE resources`)

	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	seqScans := func() int64 {
		// This session's counters reach the shared statistics when it goes
		// idle after asking for a flush.
		_, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.Eventually(t, func() bool {
			_, err := b.pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
			require.NoError(t, err)
			return b.pool.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'resources'::regclass`).Scan(&n) == nil
		}, 5*time.Second, 50*time.Millisecond)
		return n
	}
	_, err = resources.CountAll(ctx, conn.Conn())
	require.NoError(t, err)
	before := seqScans()
	require.Positive(t, before, "CountAll scans: the counter works")

	var g resources.GaugeCounts
	for range 20 {
		g, err = resources.Gauges(ctx, conn.Conn())
		require.NoError(t, err)
	}
	require.Equal(t, before, seqScans(), "no sequential scan of resources")
	require.Equal(t, int64(200000/4-200000/100), g.Pending)
	require.Equal(t, int64(200000/100), g.Failed)
	require.Equal(t, int64(200), g.TombstonesPending)
	require.Positive(t, g.Total)
	require.Positive(t, g.OldestPendingAge)

	// And the plan says so.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
		require.NoError(t, err)
		rows, err := tx.Query(ctx, `EXPLAIN SELECT count(*) FROM (SELECT changed_at FROM resources
			WHERE synced_at IS NULL AND failed_at IS NULL LIMIT 1000000) x`)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		require.NotContains(t, plan, "Seq Scan")
		require.Contains(t, plan, "resources_pending_idx")
		return nil
	}))
}

// The first runs of a prepared statement get custom plans, which saw an
// unnest of a thousand ids and joined it by hashing the whole table: every
// mark after a start read every row.
func TestMarksReadByPrimaryKeyFromTheFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 200000) g`)
	b.exec(t, `DELETE FROM resources WHERE id > 100000`)
	b.exec(t, `ANALYZE resources`)
	b.exec(t, `ANALYZE syncer_tombstones`)

	var rows, tombstones resources.Versions
	for id := int64(1); id <= 2000; id++ {
		rows.Add(id, 1)
		tombstones.Add(100000+id, 2)
	}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		// The session's own counters, before they reach the shared
		// statistics (they may still hold the setup's scans).
		seqScans := func() int64 {
			var n int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables
				WHERE relid IN ('resources'::regclass, 'syncer_tombstones'::regclass)`).Scan(&n))
			return n
		}
		before := seqScans()
		for i := range 3 {
			n, err := resources.MarkSynced(ctx, tx, rows)
			require.NoError(t, err)
			require.Equal(t, int64(2000), n, "run %d", i)
			n, err = resources.MarkSynced(ctx, tx, tombstones)
			require.NoError(t, err)
			require.Equal(t, int64(2000), n, "run %d", i)
		}
		require.Equal(t, before, seqScans(), "no sequential scan of resources or syncer_tombstones")
		return nil
	}))
	require.Equal(t, int64(2000), b.count(t, `SELECT count(*) FROM resources WHERE synced_at IS NOT NULL`))
	require.Equal(t, int64(2000), b.count(t, `SELECT count(*) FROM syncer_tombstones WHERE synced_at IS NOT NULL`))
}
