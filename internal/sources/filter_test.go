package sources_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/sources"
)

// Issue 29: a row filter, on a table and on a partitioned table (statement
// and row triggers): rows entering, leaving (unpublished, soft-deleted:
// a tombstone of the next version), never matching and deleted (never
// sent), and a row that returns after its tombstone, live above it.
func TestRowFilter(t *testing.T) {
	t.Parallel()
	tableAndPartitioned(t, "posts", `(id bigint PRIMARY KEY, status text, deleted_at timestamptz, title text)`, func(t *testing.T, b *bundle) {
		_, srcs := b.install(t, "  - table: posts\n    key: id\n    where: \"status = 'published' AND deleted_at IS NULL\"\n    destination: crm\n    snapshot: false\n")
		src := srcs["posts"]

		b.exec(t, `INSERT INTO posts VALUES (1, 'published', NULL, 'a'), (2, 'draft', NULL, 'b'), (3, 'published', NULL, 'c'), (150, 'published', NULL, 'd')`)
		rows := b.pending(t, src)
		require.Equal(t, []string{"1", "3", "150"}, keys(rows))
		b.markSynced(t, src, rows)

		// Never matching: its updates and its delete are never sent.
		b.exec(t, `UPDATE posts SET title = 'b2' WHERE id = 2`)
		b.exec(t, `DELETE FROM posts WHERE id = 2`)
		require.Empty(t, b.pending(t, src))

		// Soft-deleted: a tombstone of the next version; then nothing
		// more, not its hard delete.
		b.exec(t, `UPDATE posts SET deleted_at = now() WHERE id IN (3, 150)`)
		got := b.pending(t, src)
		require.Equal(t, []string{"3", "150"}, keys(got))
		for i, r := range got {
			require.True(t, r.Deleted, r.Key)
			require.Greater(t, r.Version, rows[i+1].Version)
		}
		b.markSynced(t, src, got)
		b.exec(t, `UPDATE posts SET title = 'c2' WHERE id = 3`)
		b.exec(t, `DELETE FROM posts WHERE id = 3`)
		require.Empty(t, b.pending(t, src))

		// Leaving (unpublished), then returning: live above its tombstone.
		b.exec(t, `UPDATE posts SET status = 'draft' WHERE id = 1`)
		got = b.pending(t, src)
		require.Equal(t, []string{"1"}, keys(got))
		require.True(t, got[0].Deleted)
		tomb := got[0].Version
		b.markSynced(t, src, got)
		b.exec(t, `UPDATE posts SET status = 'published' WHERE id = 1`)
		got = b.pending(t, src)
		require.Equal(t, []string{"1"}, keys(got))
		require.False(t, got[0].Deleted)
		require.Greater(t, got[0].Version, tomb)
		b.markSynced(t, src, got)

		// Entering: a draft published.
		b.exec(t, `INSERT INTO posts VALUES (4, 'draft', NULL, 'e')`)
		require.Empty(t, b.pending(t, src))
		b.exec(t, `UPDATE posts SET status = 'published' WHERE id = 4`)
		got = b.pending(t, src)
		require.Equal(t, []string{"4"}, keys(got))
		require.False(t, got[0].Deleted)
		b.markSynced(t, src, got)

		// TRUNCATE: only the rows that match are deleted at the third
		// party.
		b.exec(t, `TRUNCATE posts`)
		got = b.pending(t, src)
		require.Equal(t, []string{"1", "4"}, keys(got))
	})
}

// A snapshot and a replay of a filtered source send the rows that match
// when they read them.
func TestRowFilterSnapshotAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE users (id int PRIMARY KEY, discarded_at timestamptz)`)
	b.exec(t, `INSERT INTO users SELECT g, CASE WHEN g % 3 = 0 THEN now() END FROM generate_series(1, 10) g`)
	_, srcs := b.install(t, "  - table: users\n    key: id\n    where: discarded_at IS NULL\n    destination: crm\n")
	src := srcs["users"]
	require.NoError(t, b.snapshotAll(t, src))
	rows := b.pending(t, src)
	require.Equal(t, []string{"1", "2", "4", "5", "7", "8", "10"}, keys(rows))
	b.markSynced(t, src, rows)

	r := sources.ReplayRange{FromKey: "2", ToKey: "7"}
	n, err := sources.CountReplay(context.Background(), b.pool, src, r)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
}

// A filter that does not compile against the table is refused, naming the
// source and where; nothing is installed.
func TestRowFilterThatDoesNotCompile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE posts (id bigint PRIMARY KEY, status text)`)
	for _, where := range []string{"colour = 'red'", "status + 1", "status = $1", "status"} {
		_, err := sources.Install(context.Background(), b.pool, parse(t, "  - table: posts\n    key: id\n    where: \""+where+"\"\n    destination: crm\n").SourceSpecs())
		require.ErrorContains(t, err, "source posts: where: ", where)
		var se *sources.SourceError
		require.ErrorAs(t, err, &se)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_sources`))
}
