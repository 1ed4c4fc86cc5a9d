package sources_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 45: an update that changes nothing a source exports (its columns,
// or the whole row, and whether it matches its filter) writes no change
// row, checked in syncer_changes itself; one that changes anything
// exported, the key, or the match, does. On a table (statement triggers)
// and a partitioned table (row triggers), with NULLs, json and point
// values (types without equality), and statements that change some rows
// and not others.
func TestUnchangedUpdateIsNotCaptured(t *testing.T) {
	t.Parallel()
	const cols = `(id bigint PRIMARY KEY, status text, title text, doc json, at point, note text, seen_at timestamptz)`
	tableAndPartitioned(t, "posts", cols, func(t *testing.T, b *bundle) {
		b.exec(t, `CREATE TABLE whole (id bigint PRIMARY KEY, title text, doc json, note text)`)
		_, srcs := b.install(t, "  - table: posts\n    key: id\n    columns: [title, doc, at, note]\n    destination: crm\n    snapshot: false\n"+
			"  - table: posts\n    name: published\n    key: id\n    columns: [title]\n    where: \"status = 'published'\"\n    destination: crm\n    snapshot: false\n"+
			"  - table: whole\n    key: id\n    destination: crm\n    snapshot: false\n")
		changes := func(source string) int {
			t.Helper()
			return b.count(t, `SELECT count(*) FROM syncer_changes WHERE source = $1`, source)
		}
		settle := func() {
			t.Helper()
			for _, src := range srcs {
				b.markSynced(t, src, b.pending(t, src))
			}
			for _, name := range []string{"posts", "published", "whole"} {
				require.Zero(t, changes(name), name)
			}
		}

		b.exec(t, `INSERT INTO posts VALUES (1, 'published', 'a', '{"x": 1}', point(1, 2), NULL, now()),
			(2, 'draft', 'b', NULL, NULL, 'n', now()), (150, 'published', 'c', '[]', point(0, 0), NULL, now())`)
		b.exec(t, `INSERT INTO whole VALUES (1, 'a', '{"x": 1}', NULL), (2, 'b', NULL, 'n')`)
		settle()

		// Unexported columns, or exported ones set to what they were
		// (NULL to NULL, json and point to equal values): no change row.
		b.exec(t, `UPDATE posts SET seen_at = now()`)
		b.exec(t, `UPDATE posts SET status = 'published' WHERE status = 'published'`)
		b.exec(t, `UPDATE posts SET note = NULL, doc = '{"x": 1}', at = point(1, 2) WHERE id = 1`)
		b.exec(t, `UPDATE whole SET title = title, doc = doc, note = note`)
		for _, name := range []string{"posts", "published", "whole"} {
			require.Zero(t, changes(name), name)
		}

		// One statement changing one row of three: one change, that row's.
		b.exec(t, `UPDATE posts SET seen_at = now(), note = CASE WHEN id = 150 THEN 'changed' ELSE note END`)
		require.Equal(t, []string{"150"}, b.pendingState(t, srcs["posts"]))
		require.Zero(t, changes("published"), "note is not published's")
		settle()

		// NULL to a value, a value to NULL; json text that differs.
		b.exec(t, `UPDATE posts SET note = 'set' WHERE id = 1`)
		b.exec(t, `UPDATE posts SET doc = NULL WHERE id = 150`)
		b.exec(t, `UPDATE whole SET doc = '{"x":1}' WHERE id = 1`)
		require.Equal(t, []string{"1", "150"}, b.pendingState(t, srcs["posts"]))
		require.Equal(t, []string{"1"}, b.pendingState(t, srcs["whole"]))
		settle()

		// The filter: leaving it and entering it are changes, even
		// with the exported columns as they were.
		b.exec(t, `UPDATE posts SET status = 'draft' WHERE id = 1`)
		b.exec(t, `UPDATE posts SET status = 'published' WHERE id = 2`)
		require.Equal(t, []string{"1:deleted", "2"}, b.pendingState(t, srcs["published"]))
		require.Zero(t, changes("posts"), "status is not posts'")
		settle()

		// A changed key: the new key and the old one's tombstone, the
		// exported columns as they were.
		b.exec(t, `UPDATE posts SET id = 3 WHERE id = 2`)
		require.Equal(t, []string{"2:deleted", "3"}, b.pendingState(t, srcs["posts"]))
		require.Equal(t, []string{"2:deleted", "3"}, b.pendingState(t, srcs["published"]))
		settle()

		// A delete is always a change.
		b.exec(t, `DELETE FROM posts WHERE id = 3`)
		require.Equal(t, []string{"3:deleted"}, b.pendingState(t, srcs["posts"]))
	})
}
