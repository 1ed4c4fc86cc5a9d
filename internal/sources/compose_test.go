package sources_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Issue 57: the marks composed into the statement that also writes a
// batch's story and digests (ComposeSynced) do what MarkSynced does: the
// changes up to the versions sent go, a later change stays pending, and a
// failure the version supersedes goes; the keys and versions it returns
// read as the statement's other pieces want them. Its placeholders come
// after others' ($12 and on), which must not be read as $1.
func TestComposedMarksAreMarkSynced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `CREATE TABLE orders (id int PRIMARY KEY, status text)`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	src := srcs["orders"]
	b.exec(t, `INSERT INTO orders VALUES (1, 'a'), (2, 'b'), (3, 'c')`)
	sent := b.pending(t, src)
	require.Len(t, sent, 3)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return sources.MarkFailed(ctx, tx, src, []string{"3"}, []int64{sent[2].Version - 1}, []string{"an older version failed"})
	}))
	b.exec(t, `UPDATE orders SET status = 'a2' WHERE id = 1`)
	b.exec(t, `CREATE TABLE seen (key text, version bigint)`)

	var s compose.Statement
	others := make([]string, 11)
	for i := range others {
		others[i] = s.Arg("x") + "::text"
	}
	s.Call(`SELECT ARRAY[` + strings.Join(others, ", ") + `] AS others`)
	var ks []string
	var vs []int64
	for _, r := range sent {
		ks, vs = append(ks, r.Key), append(vs, r.Version)
	}
	keys, versions, err := sources.ComposeSynced(&s, src, ks, vs)
	require.NoError(t, err)
	s.Modify(`INSERT INTO seen SELECT * FROM unnest(` + keys + `, ` + versions + `)`)
	qb := &pgx.Batch{}
	s.Queue(qb, "composed")
	require.NoError(t, b.pool.SendBatch(ctx, qb).Close())
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM seen WHERE (key, version) IN (SELECT u.k, u.v FROM unnest($1::text[], $2::bigint[]) AS u(k, v))`, ks, vs),
		"the keys and versions returned read as sent")

	left := b.pending(t, src)
	require.Len(t, left, 1, "key 1 changed after its version was sent")
	require.Equal(t, "1", left[0].Key)
	require.Greater(t, left[0].Version, sent[0].Version)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_source_failures`), "the failure of an older version of key 3 is gone")
}
