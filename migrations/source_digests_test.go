package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/migrations"
)

// Migration 034 (issue 57): the sources' digests move to
// syncer_source_digests. Those of syncer_accepted_bodies are deleted, and
// what the previous release writes there for a source during a rolling
// upgrade is dropped, so that it never skips a version for a body older
// than one this release had accepted since; resources' pass on to 033's
// trigger.
func TestPreviousReleasesSourceDigestsAreDropped(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := migratedTo(t, 33)
	_, err := pool.Exec(ctx, `INSERT INTO syncer_accepted_bodies (feed, tenant, key, digest) VALUES
		('orders', '', '1', '\x01'), ('contacts', 'acme', '1', '\x02')`)
	require.NoError(t, err)

	_, err = migrations.UpTo(ctx, pool, 34)
	require.NoError(t, err)
	count := func(sql string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&n))
		return n
	}
	require.Zero(t, count(`SELECT count(*) FROM syncer_accepted_bodies`), "the sources' digests are deleted")

	// The previous release's writes: its upsert and its function. This
	// release's digest of a key it accepted goes with them.
	_, err = pool.Exec(ctx, `INSERT INTO syncer_source_digests (slot, feed, tenant, key, digest)
		VALUES (hashtextextended('2', hashtext('orders')), 'orders', '', '2', '\x07'),
		(hashtextextended('9', hashtext('orders')), 'orders', '', '9', '\x07')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO syncer_accepted_bodies (feed, tenant, key, digest) VALUES ('orders', '', '2', '\x03')
		ON CONFLICT (feed, tenant, key) DO UPDATE SET digest = EXCLUDED.digest`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT syncer_keep_digests('contacts', 'acme', ARRAY['3'], ARRAY['\x04'::bytea])`)
	require.NoError(t, err)
	require.Zero(t, count(`SELECT count(*) FROM syncer_accepted_bodies`), "dropped on their way in")
	require.Equal(t, 1, count(`SELECT count(*) FROM syncer_source_digests WHERE key = '9'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM syncer_source_digests`), "2's digest is gone with the previous release's accept")

	// Resources' go to 033's trigger, which takes them out at commit.
	_, err = pool.Exec(ctx, `INSERT INTO resources (id, payload) VALUES (5, '{}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE resources SET accepted_digest = '\x05'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO syncer_accepted_bodies (feed, tenant, key, digest) VALUES ('resources', '', '5', '\x06')`)
	require.NoError(t, err)
	require.Zero(t, count(`SELECT count(*) FROM syncer_accepted_bodies`))
	require.Zero(t, count(`SELECT count(*) FROM resources WHERE accepted_digest IS NOT NULL`), "033's trigger saw it")
}
