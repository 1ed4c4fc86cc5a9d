package resources_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// PendingKept returns each row's and tombstone's kept digest with it
// (accepted_digest, migration 033: issue 45's comparison with the body
// last accepted costs no statement of its own, and since issues 55 and 57
// no probe either); nil where none is kept; the rows and the generation
// are otherwise Pending's.
func TestPendingKeptReadsTheKeptDigests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}'), (3, '{"c": 3}')`)
	b.exec(t, `UPDATE resources SET accepted_digest = '\x01' WHERE id = 1`)
	b.exec(t, `UPDATE resources SET accepted_digest = '\x03' WHERE id = 3`)
	b.exec(t, `DELETE FROM resources WHERE id = 3`)

	p, err := resources.PendingKept(ctx, b.pool, resources.Start, lim, nil)
	require.NoError(t, err)
	plain, err := resources.Pending(ctx, b.pool, resources.Start, lim, nil)
	require.NoError(t, err)
	require.Equal(t, plain.Gen, p.Gen)
	require.Equal(t, plain.End, p.End)
	require.Len(t, p.Rows, 3)
	got := map[int64][]byte{}
	for i, r := range p.Rows {
		got[r.ID] = r.Kept
		r.Kept = nil
		require.Equal(t, plain.Rows[i], r, "otherwise Pending's rows")
	}
	require.Equal(t, map[int64][]byte{1: {1}, 2: nil, 3: {3}}, got)
	require.True(t, p.Rows[2].Deleted, "a tombstone's digest, carried from its row")
}

// The last accepted body's digest goes with an id between its row and
// its tombstone (migration 033's triggers): a delete carries the row's to
// the tombstone, an insert that brings the id back carries the
// tombstone's to the row, whose version goes on above it.
func TestAcceptedDigestFollowsTheID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}')`)
	b.exec(t, `UPDATE resources SET accepted_digest = '\x01'`)
	b.exec(t, `DELETE FROM resources WHERE id = 1`)
	var d []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT accepted_digest FROM syncer_tombstones WHERE id = 1`).Scan(&d))
	require.Equal(t, []byte{1}, d, "the row's, on its tombstone")

	b.exec(t, `UPDATE syncer_tombstones SET accepted_digest = '\x0d', synced_at = now()`)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 2}')`)
	var v int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT version, accepted_digest FROM resources WHERE id = 1`).Scan(&v, &d))
	require.Equal(t, []byte{0x0d}, d, "the tombstone's, on the row back")
	require.Equal(t, int64(3), v)

	b.exec(t, `INSERT INTO resources (id, payload) VALUES (3, '{}')`)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT accepted_digest FROM resources WHERE id = 3`).Scan(&d))
	require.Nil(t, d, "a new id has none")
	// Marks and digests are not a change: no new version, no event.
	var events int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_outbox`).Scan(&events))
	b.exec(t, `UPDATE resources SET accepted_digest = '\x02', synced_at = now() WHERE id = 2`)
	var after int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_outbox`).Scan(&after))
	require.Equal(t, events, after)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT version FROM resources WHERE id = 2`).Scan(&v))
	require.Equal(t, int64(1), v)
}

// The composed marks keep each row's digest with its mark: on exactly
// the versions given for synced_at, and on a row whose version moved on
// too, unmarked (the third party holds that body now).
func TestComposeSyncedKeepsTheDigests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}')`)
	b.exec(t, `UPDATE resources SET payload = '{"b": 3}' WHERE id = 2`)
	var s compose.Statement
	ids, versions := s.Arg([]int64{1, 2}), s.Arg([]int64{1, 1})
	sums := s.Arg([]byte("aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbb"))
	resources.ComposeSynced(&s, ids, versions, sums, 16)
	qb := &pgx.Batch{}
	s.Queue(qb, "mark")
	require.NoError(t, b.pool.SendBatch(ctx, qb).Close())
	type row struct {
		synced bool
		digest string
	}
	got := map[int64]row{}
	rows, err := b.pool.Query(ctx, `SELECT id, synced_at IS NOT NULL, accepted_digest FROM resources`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var r row
		var d []byte
		require.NoError(t, rows.Scan(&id, &r.synced, &d))
		r.digest = string(d)
		got[id] = r
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int64]row{1: {true, "aaaaaaaaaaaaaaaa"}, 2: {false, "bbbbbbbbbbbbbbbb"}}, got)
}

// A daemon of the previous release keeps resources' digests in
// syncer_accepted_bodies (a rolling upgrade): what it writes there is
// taken out, and the digest on the row of its key with it, so neither
// release compares with a digest older than the other's accepted body. A
// configured source's digests stay.
func TestPreviousReleasesDigestsOfResourcesClearTheRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}')`)
	b.exec(t, `UPDATE resources SET accepted_digest = '\x01'`)
	b.exec(t, `SELECT syncer_keep_digests('resources', '', ARRAY['1'], ARRAY['\x09'::bytea])`)
	b.exec(t, `INSERT INTO syncer_accepted_bodies (feed, tenant, key, digest) VALUES ('orders', '', '2', '\x09')`)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_accepted_bodies WHERE feed = 'resources'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_accepted_bodies WHERE feed = 'orders'`).Scan(&n))
	require.Equal(t, 1, n)
	var d1, d2 []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT accepted_digest FROM resources WHERE id = 1), (SELECT accepted_digest FROM resources WHERE id = 2)`).Scan(&d1, &d2))
	require.Nil(t, d1, "the previous release's accept clears the row's digest")
	require.Equal(t, []byte{1}, d2)

	// Its composed marks: the mark and the digests, pieces of one
	// statement over the same rows, as 602b0a1 sent them.
	for _, fresh := range []bool{true, false} {
		b.exec(t, `UPDATE resources SET payload = payload || '{"v": 1}'`)
		b.exec(t, `UPDATE resources SET accepted_digest = '\x01'`)
		var vs []int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT array_agg(version ORDER BY id) FROM resources`).Scan(&vs))
		var s compose.Statement
		ids, versions := s.Arg([]int64{1, 2}), s.Arg(vs)
		resources.ComposeSynced(&s, ids, versions, "", 0)
		ds := unchanged.NewDigests(2)
		ds.Add("tag", feed.Item{ID: "1", Payload: []byte(`{}`)})
		ds.Add("tag", feed.Item{ID: "2", Payload: []byte(`{}`)})
		unchanged.ComposeSettled(&s, "resources", "", resources.KeysSQL(ids), ds, fresh)
		qb := &pgx.Batch{}
		s.Queue(qb, "mark")
		require.NoError(t, b.pool.SendBatch(ctx, qb).Close(), "fresh %v", fresh)
		require.Equal(t, 0, b.countOf(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL OR accepted_digest IS NOT NULL`), "fresh %v", fresh)
		require.Equal(t, 0, b.countOf(t, `SELECT count(*) FROM syncer_accepted_bodies WHERE feed = 'resources'`), "fresh %v", fresh)
	}
}

// The previous release's heal (a resend at a new version that forgets
// the digests in syncer_accepted_bodies only) clears the digests on the
// rows and tombstones it resends; this release's Resend clears them too.
func TestResendForgetsTheDigests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}'), (3, '{"c": 3}'), (4, '{}')`)
	b.exec(t, `UPDATE resources SET accepted_digest = '\x01', synced_at = now()`)
	b.exec(t, `DELETE FROM resources WHERE id = 3`)
	// 602b0a1's resources.Resend.
	b.exec(t, `WITH r AS (UPDATE resources SET version = version + 1, changed_at = now(),
				synced_at = NULL, failed_at = NULL, sync_error = NULL
			WHERE id = ANY($1) RETURNING 1),
		t AS (UPDATE syncer_tombstones SET version = version + 1, deleted_at = now(),
				synced_at = NULL, failed_at = NULL, sync_error = NULL
			WHERE id = ANY($1) RETURNING 1)
		SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM t)`, []int64{1, 3})
	require.Equal(t, 0, b.countOf(t, `SELECT count(*) FROM resources WHERE id = 1 AND accepted_digest IS NOT NULL`))
	require.Equal(t, 0, b.countOf(t, `SELECT count(*) FROM syncer_tombstones WHERE id = 3 AND accepted_digest IS NOT NULL`))
	require.Equal(t, 2, b.countOf(t, `SELECT count(*) FROM resources WHERE id IN (2, 4) AND accepted_digest IS NOT NULL`))

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	n, err := resources.Resend(ctx, tx, []int64{2})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, b.countOf(t, `SELECT count(*) FROM resources WHERE accepted_digest IS NOT NULL`), "only 4's is left")
}

func (b *bundle) countOf(t *testing.T, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}
