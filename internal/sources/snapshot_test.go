package sources_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/sources"
)

func TestSnapshotIsResumable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id int PRIMARY KEY, status text)`)
	b.exec(t, `INSERT INTO orders SELECT g, 's' || g FROM generate_series(1, 25) g`)
	b.exec(t, `ANALYZE orders`)
	b.exec(t, `CREATE TABLE quiet (id int PRIMARY KEY)`)
	b.exec(t, `INSERT INTO quiet SELECT generate_series(1, 5)`)
	const file = "  - table: orders\n    key: id\n    destination: crm\n  - table: quiet\n    key: id\n    destination: crm\n    snapshot: false\n"
	_, srcs := b.install(t, file)
	require.Equal(t, sources.SnapshotPending, b.stat(t, "orders").Snapshot)
	require.Equal(t, -1.0, b.stat(t, "orders").SnapshotPercent())

	done, err := sources.Snapshot(ctx, b.pool, srcs["orders"], 10)
	require.NoError(t, err)
	require.False(t, done)
	st := b.stat(t, "orders")
	require.Equal(t, sources.SnapshotRunning, st.Snapshot)
	require.Equal(t, int64(10), st.SnapshotRows)
	require.Equal(t, int64(25), st.SnapshotTotal, "estimated from the statistics")
	require.Equal(t, 40.0, st.SnapshotPercent())

	// A write during the snapshot, and a restart: the snapshot goes on
	// from its cursor, with a source loaded anew.
	b.exec(t, `UPDATE orders SET status = 'changed' WHERE id = 20`)
	_, again := b.install(t, file)
	for {
		done, err = sources.Snapshot(ctx, b.pool, again["orders"], 10)
		require.NoError(t, err)
		if done {
			break
		}
	}
	st = b.stat(t, "orders")
	require.Equal(t, sources.SnapshotDone, st.Snapshot)
	require.Equal(t, int64(25), st.SnapshotRows)
	require.Equal(t, 100.0, st.SnapshotPercent())
	require.Equal(t, int64(25), st.PendingKeys)
	require.Equal(t, 26, b.count(t, `SELECT count(*) FROM syncer_changes WHERE source = 'orders'`), "each row once, and the update")

	rows := b.pending(t, srcs["orders"])
	require.Len(t, rows, 25)
	require.Equal(t, "1", rows[0].Key)
	require.Equal(t, "25", rows[24].Key)
	require.JSONEq(t, `{"id": 20, "status": "changed"}`, string(rows[19].Payload))

	// Done is done: another call logs nothing.
	done, err = sources.Snapshot(ctx, b.pool, srcs["orders"], 10)
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, 26, b.count(t, `SELECT count(*) FROM syncer_changes WHERE source = 'orders'`))

	// A replay of the whole source: every row once more, above the
	// versions sent.
	b.markSynced(t, srcs["orders"], rows)
	ok, err := sources.Resnapshot(ctx, b.pool, "orders")
	require.NoError(t, err)
	require.True(t, ok)
	for done = false; !done; {
		done, err = sources.Snapshot(ctx, b.pool, srcs["orders"], 10)
		require.NoError(t, err)
	}
	replayed := b.pending(t, srcs["orders"])
	require.Len(t, replayed, 25)
	require.Greater(t, replayed[0].Version, rows[24].Version)
	ok, err = sources.Resnapshot(ctx, b.pool, "nope")
	require.NoError(t, err)
	require.False(t, ok)

	// snapshot: false logs nothing of what was there.
	require.Equal(t, sources.SnapshotSkipped, b.stat(t, "quiet").Snapshot)
	done, err = sources.Snapshot(ctx, b.pool, srcs["quiet"], 10)
	require.NoError(t, err)
	require.True(t, done)
	require.Empty(t, b.pending(t, srcs["quiet"]))
}

func TestSnapshotTextKeysInTheirOwnOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE tags (name text PRIMARY KEY)`)
	var names []string
	for i := range 23 {
		names = append(names, fmt.Sprintf("tag %c%d", 'a'+rune(i%5), i))
	}
	b.exec(t, `INSERT INTO tags SELECT unnest($1::text[])`, names)
	_, srcs := b.install(t, "  - table: tags\n    key: name\n    destination: crm\n")
	for {
		done, err := sources.Snapshot(ctx, b.pool, srcs["tags"], 4)
		require.NoError(t, err)
		if done {
			break
		}
	}
	got := keys(b.pending(t, srcs["tags"]))
	sort.Strings(names)
	require.Equal(t, names, got)
}

// A chunk that meets a row a writer holds waits for it a moment, then
// gives up without logging anything; the next call goes on.
func TestSnapshotGivesWayToALongWriter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id int PRIMARY KEY, status text)`)
	b.exec(t, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 5) g`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	writer, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback(ctx) }()
	_, err = writer.Exec(ctx, `UPDATE orders SET status = 'held' WHERE id = 3`)
	require.NoError(t, err)

	_, err = sources.Snapshot(ctx, b.pool, srcs["orders"], 10)
	require.ErrorIs(t, err, sources.ErrSnapshotBusy)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_changes`))
	require.Equal(t, sources.SnapshotPending, b.stat(t, "orders").Snapshot)

	require.NoError(t, writer.Commit(ctx))
	done, err := sources.Snapshot(ctx, b.pool, srcs["orders"], 10)
	require.NoError(t, err)
	require.True(t, done)
	rows := b.pending(t, srcs["orders"])
	require.Len(t, rows, 5)
	require.JSONEq(t, `{"id": 3, "status": "held"}`, string(rows[2].Payload))
}
