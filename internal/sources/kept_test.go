package sources_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// PendingKept returns each key's kept digest with it (issue 45: the
// comparison with the body last accepted costs no statement of its own):
// the digest kept under the source's name, nil for a key with none or
// with one under another source's name only; a text key (COLLATE "C" in
// the change log) finds its digest as an integer key does; the rows are
// otherwise Pending's.
func TestPendingKeptReadsTheKeptDigests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `CREATE TABLE posts (id bigint PRIMARY KEY, title text)`)
	b.exec(t, `CREATE TABLE tags (name text PRIMARY KEY, n int)`)
	_, srcs := b.install(t, "  - {table: posts, key: id, destination: crm, snapshot: false}\n  - {table: tags, key: name, destination: crm, snapshot: false}\n")
	b.exec(t, `INSERT INTO posts VALUES (1, 'a'), (2, 'b'), (3, 'c')`)
	b.exec(t, `INSERT INTO tags VALUES ('Zeta', 1), ('alpha', 2)`)
	b.exec(t, `INSERT INTO syncer_source_digests (slot, feed, tenant, key, digest)
		SELECT `+unchanged.SlotSQL("v.feed", "v.key")+`, v.feed, '', v.key, v.digest FROM (VALUES
		('posts', '1', '\x01'::bytea), ('posts', '3', '\x03'), ('tags', '2', '\x09'),
		('tags', 'alpha', '\x0a'), ('posts', 'Zeta', '\x0b')) AS v (feed, key, digest)`)
	lim := feed.Limits{Items: 10}.WithDefaults()

	kept := func(src *sources.Source) map[string][]byte {
		t.Helper()
		p, err := sources.PendingKept(ctx, b.pool, src, sources.Scope{}, "", true, lim)
		require.NoError(t, err)
		plain, err := sources.Pending(ctx, b.pool, src, "", true, lim)
		require.NoError(t, err)
		require.Len(t, p.Rows, len(plain.Rows))
		out := map[string][]byte{}
		for i, r := range p.Rows {
			out[r.Key] = r.Kept
			r.Kept = nil
			require.Equal(t, plain.Rows[i], r, "otherwise Pending's rows")
		}
		return out
	}
	require.Equal(t, map[string][]byte{"1": {1}, "2": nil, "3": {3}}, kept(srcs["posts"]))
	require.Equal(t, map[string][]byte{"Zeta": nil, "alpha": {0x0a}}, kept(srcs["tags"]))

	// After a cursor, too.
	p, err := sources.PendingKept(ctx, b.pool, srcs["posts"], sources.Scope{}, "2", false, lim)
	require.NoError(t, err)
	require.Len(t, p.Rows, 1)
	require.Equal(t, []byte{3}, p.Rows[0].Kept)
}
