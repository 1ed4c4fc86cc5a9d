package exporter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// resources keeps the digest of each row's accepted body on the row
// (accepted_digest, migration 033), written by the marks' own UPDATE
// (issues 55 and 57): a drain writes no row into syncer_accepted_bodies,
// and every row drained holds its body's digest. An update that changes
// a payload and changes it back is still settled as skipped, with no
// request; so is a key deleted again before its return went out, after
// its tombstone was accepted (the digest goes with the id between its row
// and its tombstone). An id brought back after its accepted tombstone is
// sent, whatever body it had before.
func TestResourcesKeepTheirDigestsOnTheirRows(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10})
	b.src.base().BodyTag = "json-tag"
	ctx := t.Context()
	b.insert(t, 35)
	pass := func() {
		t.Helper()
		_, err := b.passAll(t)
		require.NoError(t, err)
		require.Zero(t, b.count(t, `synced_at IS NULL`), "all synced")
	}
	calls := func() int {
		c, _, _, _ := b.pusher.snapshot()
		return len(c)
	}
	pass()
	var bodies int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_accepted_bodies`).Scan(&bodies))
	require.Zero(t, bodies, "no digest of resources in syncer_accepted_bodies")
	rows, err := b.pool.Query(ctx, `SELECT id::text, payload::text, accepted_digest FROM resources ORDER BY id`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var id, payload string
		var digest []byte
		require.NoError(t, rows.Scan(&id, &payload, &digest))
		// The payload as sent is jsonb's text, as read.
		require.Equal(t, unchanged.Digest("json-tag", feed.Item{ID: id, Payload: []byte(payload)}), digest, "row %s", id)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 35, n)

	// Changed and changed back: a new version, the body accepted.
	before := calls()
	_, err = b.pool.Exec(ctx, `UPDATE resources SET payload = '{"x": 1}' WHERE id = 3`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE resources SET payload = jsonb_build_object('n', 3) WHERE id = 3`)
	require.NoError(t, err)
	require.Equal(t, 1, b.count(t, `id = 3 AND version = 3 AND synced_at IS NULL`))
	pass()
	require.Equal(t, before, calls(), "no request for an unchanged body")

	// Deleted: the tombstone goes, and its digest is kept on it.
	_, err = b.pool.Exec(ctx, `DELETE FROM resources WHERE id = 4`)
	require.NoError(t, err)
	pass()
	require.Equal(t, before+1, calls(), "the tombstone went")
	var tomb []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT accepted_digest FROM syncer_tombstones WHERE id = 4 AND synced_at IS NOT NULL`).Scan(&tomb))
	require.Equal(t, unchanged.Digest("json-tag", feed.Item{ID: "4", Deleted: true}), tomb)

	// Back and deleted again before it went out: the third party holds
	// the delete.
	_, err = b.pool.Exec(ctx, `BEGIN; INSERT INTO resources (id, payload) VALUES (4, '{"n": 4}'); DELETE FROM resources WHERE id = 4; COMMIT`)
	require.NoError(t, err)
	var pending int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_tombstones WHERE id = 4 AND synced_at IS NULL`).Scan(&pending))
	require.Equal(t, 1, pending)
	_, err = b.passAll(t)
	require.NoError(t, err)
	require.Equal(t, before+1, calls(), "no request for a delete the third party has")
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_tombstones WHERE synced_at IS NULL`).Scan(&pending))
	require.Zero(t, pending)

	// Back with the very body it had before its delete: sent, the third
	// party holds the delete.
	_, err = b.pool.Exec(ctx, `INSERT INTO resources (id, payload) VALUES (4, '{"n": 4}')`)
	require.NoError(t, err)
	pass()
	c, _, _, _ := b.pusher.snapshot()
	require.Len(t, c, before+2, "the id brought back is sent")
	require.Equal(t, []string{"4"}, itemIDs(c[len(c)-1]))
}

// A key whose batch is resent from its record, or deferred, loses the
// digest on its row: the third party's copy of it is in doubt, so its
// next version is sent, not skipped.
func TestResourcesDeferredRowLosesItsDigest(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10})
	b.src.base().BodyTag = "json-tag"
	ctx := t.Context()
	b.insert(t, 3)
	_, err := b.passAll(t)
	require.NoError(t, err)
	require.Equal(t, 3, b.count(t, `accepted_digest IS NOT NULL`))

	_, err = b.pool.Exec(ctx, `UPDATE resources SET payload = '{"y": 2}' WHERE id = 2`)
	require.NoError(t, err)
	b.pusher.answer = func(_ context.Context, _ int, d delivery.Batch) (*delivery.Outcome, error) {
		return &delivery.Outcome{Deferred: []delivery.Deferral{{Item: d.Items[0], Reason: "busy"}}, Requests: 1}, nil
	}
	_, err = b.passAll(t)
	require.NoError(t, err)
	require.Equal(t, 1, b.count(t, `id = 2 AND accepted_digest IS NULL`), "a deferred key's digest is forgotten")
}

func itemIDs(b delivery.Batch) []string {
	out := make([]string, len(b.Items))
	for i, it := range b.Items {
		out[i] = it.ID
	}
	return out
}
