package sources_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Issue 29: a composite key of text and bigint, captured, snapshotted and
// replayed by range. ('a,b', 3) and ('a', 3) are two ids; a key's text is
// the compact JSON array of its values in the order key lists them.
func TestCompositeKeyTextAndBigint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE line_items (id bigint, tenant_id text, qty int, PRIMARY KEY (id, tenant_id))`)
	_, srcs := b.install(t, "  - table: line_items\n    key: [tenant_id, id]\n    destination: crm\n    snapshot: false\n")
	src := srcs["line_items"]
	require.Equal(t, sources.KeyComposite, src.Kind)
	require.Equal(t, []string{"tenant_id", "id"}, src.Keys)

	b.exec(t, `INSERT INTO line_items (tenant_id, id, qty) VALUES ('a,b', 3, 1), ('a', 3, 2), ('x"y\é', -7, 3)`)
	rows := b.pending(t, src)
	require.Equal(t, []string{`["a",3]`, `["a,b",3]`, `["x\"y\\é",-7]`}, keys(rows))
	for _, r := range rows {
		require.False(t, r.Deleted)
		require.NotNil(t, r.Payload)
	}
	require.JSONEq(t, `{"tenant_id": "a", "id": 3, "qty": 2}`, string(rows[0].Payload))
	b.markSynced(t, src, rows)
	require.Empty(t, b.pending(t, src))

	last := rows[1].Version
	b.exec(t, `UPDATE line_items SET qty = 5 WHERE tenant_id = 'a,b' AND id = 3`)
	got := b.pending(t, src)
	require.Equal(t, []string{`["a,b",3]`}, keys(got))
	require.Greater(t, got[0].Version, last)
	require.JSONEq(t, `{"tenant_id": "a,b", "id": 3, "qty": 5}`, string(got[0].Payload))
	b.markSynced(t, src, got)

	b.exec(t, `DELETE FROM line_items WHERE tenant_id = 'a,b' AND id = 3`)
	got = b.pending(t, src)
	require.Equal(t, []string{`["a,b",3]`}, keys(got))
	require.True(t, got[0].Deleted)
	b.markSynced(t, src, got)

	// A changed key is a new key and a deleted one.
	b.exec(t, `UPDATE line_items SET id = 4 WHERE tenant_id = 'a' AND id = 3`)
	got = b.pending(t, src)
	require.Equal(t, []string{`["a",3]`, `["a",4]`}, keys(got))
	require.True(t, got[0].Deleted)
	require.False(t, got[1].Deleted)
	b.markSynced(t, src, got)

	// A replay by composite range: bounds compared column by column (text
	// in byte order, the bigint as a number), inclusive.
	b.exec(t, `INSERT INTO line_items (tenant_id, id, qty) SELECT 'm', g, 0 FROM generate_series(1, 12) g`)
	b.markSynced(t, src, b.pending(t, src))
	r := sources.ReplayRange{FromKey: `[ "m", 2 ]`, ToKey: `["m",10]`}
	require.NoError(t, src.CheckRange(&r))
	require.Equal(t, `["m",2]`, r.FromKey)
	n, err := sources.CountReplay(context.Background(), b.pool, src, r)
	require.NoError(t, err)
	require.EqualValues(t, 9, n)
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, err := replays.Create(context.Background(), tx, replays.Request{Source: src.Name, Range: r}, n)
		return err
	}))
	require.NoError(t, b.snapshotAll(t, src))
	var want []string
	for i := 2; i <= 10; i++ {
		want = append(want, `["m",`+itoa(i)+`]`)
	}
	got = b.pending(t, src)
	require.ElementsMatch(t, want, keys(got))

	bad := sources.ReplayRange{FromKey: `["m","2"]`}
	require.ErrorIs(t, src.CheckRange(&bad), sources.ErrBadKey)
	bad = sources.ReplayRange{FromKey: `["m",3]`, ToKey: `["m",2]`}
	require.ErrorIs(t, src.CheckRange(&bad), sources.ErrBadKey)
}

// A composite key's snapshot logs every row once, in the key's order, and
// resumes after its cursor.
func TestCompositeKeySnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE memberships (org text, user_id int, PRIMARY KEY (org, user_id))`)
	b.exec(t, `INSERT INTO memberships VALUES ('b', 1), ('a', 2), ('a', 10), ('a,b', 1), ('b', -1)`)
	_, srcs := b.install(t, "  - table: memberships\n    key: [org, user_id]\n    destination: crm\n")
	src := srcs["memberships"]
	require.NoError(t, b.snapshotAll(t, src))
	require.ElementsMatch(t, []string{`["a",2]`, `["a",10]`, `["a,b",1]`, `["b",-1]`, `["b",1]`}, keys(b.pending(t, src)))
	require.Equal(t, 5, b.count(t, `SELECT count(*) FROM syncer_changes`))
}

func itoa(i int) string { return strconv.Itoa(i) }

// A table without a primary key is refused by migrate (Install) and by
// run (Resolve) with the same line naming the source, an error of the
// user's setting (exit 2).
func TestNoPrimaryKeyRefusedByInstallAndResolve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE events (id bigint, v text)`)
	cfg := parse(t, "  - table: events\n    key: id\n    destination: crm\n")
	_, err := sources.Install(context.Background(), b.pool, cfg.SourceSpecs())
	require.ErrorIs(t, err, sources.ErrNoPrimaryKey)
	_, err = sources.Resolve(context.Background(), b.pool, cfg.SourceSpecs())
	require.ErrorIs(t, err, sources.ErrNoPrimaryKey)
	require.ErrorContains(t, err, "source events: table "+b.schema+".events has no primary key: a source needs one (key: id)")
	var usage interface{ IsUsage() bool }
	require.ErrorAs(t, err, &usage)
	require.True(t, usage.IsUsage())
}
