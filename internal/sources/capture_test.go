package sources_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/sources"
)

// aliasColumns names a column after every alias, column and variable of
// syncer's SQL on a source: the pending read (c, k, r, t, found, num, key,
// version, payload, seq, source), the snapshot (r, k, ins), the capture
// function (n, o, g, syncer_new, syncer_old, syncer_source, syncer_rows,
// deleted, armed, lease_until, tg_op) and the marks and stats (b, f, u, i,
// a, p, o, s, done, error, changed_at).
var aliasColumns = []string{
	"t", "r", "c", "k", "n", "o", "g", "b", "f", "u", "i", "a", "p", "s",
	"src", "chg", "ins", "done", "found", "num", "key", "seq", "source",
	"version", "payload", "deleted", "changed_at", "error", "armed",
	"lease_until", "syncer_new", "syncer_old", "syncer_source", "syncer_rows",
	"tg_op",
}

// aliasTable creates a table whose key is id and whose other columns are
// aliasColumns, all text.
func (b *bundle) aliasTable(t *testing.T, name, key string) {
	t.Helper()
	cols := []string{pgx.Identifier{key}.Sanitize() + " bigint PRIMARY KEY"}
	for _, c := range aliasColumns {
		if c != key {
			cols = append(cols, pgx.Identifier{c}.Sanitize()+" text")
		}
	}
	b.exec(t, `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (`+strings.Join(cols, ", ")+`)`)
}

// Issue 24, point 1: a column named like one of syncer's aliases (t, k,
// payload...) neither replaces the whole row in its payload nor makes a
// live row look deleted, with the values NULL or not, for whole-row and
// column-list sources, keyed by a column named k or key.
func TestColumnsNamedLikeSyncersAliases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.aliasTable(t, "items", "k")
	b.aliasTable(t, "things", "key")
	listed := `[` + strings.Join(aliasColumns, ", ") + `]`
	listed = strings.Replace(listed, "key, ", "", 1)
	_, srcs := b.install(t, "  - table: items\n    key: k\n    destination: crm\n    snapshot: false\n"+
		"  - table: things\n    key: key\n    columns: "+listed+"\n    destination: crm\n    snapshot: false\n")

	for _, tbl := range []string{"items", "things"} {
		q := pgx.Identifier{tbl}.Sanitize()
		b.exec(t, `INSERT INTO `+q+` (`+keyOf(tbl)+`, t, payload, found) VALUES (1, 'hello', 'p', 'f')`)
		b.exec(t, `INSERT INTO `+q+` (`+keyOf(tbl)+`) VALUES (2)`) // every other column NULL
		b.exec(t, `INSERT INTO `+q+` (`+keyOf(tbl)+`, t) VALUES (3, 'gone')`)
		b.exec(t, `DELETE FROM `+q+` WHERE `+keyOf(tbl)+` = 3`)
		b.exec(t, `UPDATE `+q+` SET t = NULL, src = 'kk' WHERE `+keyOf(tbl)+` = 1`)
	}

	for _, name := range []string{"items", "things"} {
		rows := b.pending(t, srcs[name])
		require.Equal(t, []string{"1", "2", "3"}, keys(rows), name)
		require.False(t, rows[0].Deleted, "%s: row 1 lives", name)
		require.False(t, rows[1].Deleted, "%s: row 2 lives, its t NULL", name)
		require.True(t, rows[2].Deleted, "%s: row 3 was deleted", name)
		require.Nil(t, rows[2].Payload)
		require.JSONEq(t, aliasPayload(name, 1, map[string]string{"payload": "p", "found": "f", "src": "kk"}), string(rows[0].Payload), name)
		require.JSONEq(t, aliasPayload(name, 2, nil), string(rows[1].Payload), name)
	}
}

func keyOf(table string) string {
	if table == "items" {
		return "k"
	}
	return "key"
}

// aliasPayload is the JSON of a row of aliasTable as its source sends it:
// items the whole row (its key k included), things its configured columns
// (every alias but its key); every column NULL but those set.
func aliasPayload(table string, key int, set map[string]string) string {
	var fields []string
	for _, c := range aliasColumns {
		v := "null"
		switch {
		case c == "key" && table == "things":
			continue
		case c == keyOf(table):
			v = strconv.Itoa(key)
		case set[c] != "":
			v = strconv.Quote(set[c])
		}
		fields = append(fields, strconv.Quote(c)+": "+v)
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

// pendingState reads every pending key as "key" or "key:deleted".
func (b *bundle) pendingState(t *testing.T, src *sources.Source) []string {
	t.Helper()
	var out []string
	for _, r := range b.pending(t, src) {
		if r.Deleted {
			out = append(out, r.Key+":deleted")
		} else {
			out = append(out, r.Key)
		}
	}
	return out
}

// Issue 24, point 2: writes to a partitioned table are captured whether
// they name the table or a partition, at any depth, in partitions made
// after migrate too; TRUNCATE of the table or of a partition logs each row
// it removes once; a partition made after migrate is listed until migrate
// gives it its TRUNCATE trigger, and one attached with rows restarts the
// snapshot.
func TestPartitionWritesAreCaptured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE events (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id)`)
	b.exec(t, `CREATE TABLE p1 PARTITION OF events FOR VALUES FROM (0) TO (100)`)
	b.exec(t, `CREATE TABLE p2 PARTITION OF events FOR VALUES FROM (100) TO (200) PARTITION BY RANGE (id)`)
	b.exec(t, `CREATE TABLE p2a PARTITION OF p2 FOR VALUES FROM (100) TO (150)`)
	b.exec(t, `CREATE TABLE p2b PARTITION OF p2 FOR VALUES FROM (150) TO (200)`)
	b.exec(t, `INSERT INTO events VALUES (1, 'before')`)
	const file = "  - table: events\n    key: id\n    destination: crm\n"
	res, srcs := b.install(t, file)
	require.Equal(t, sources.Installed, res.Changes[0].Action)
	src := srcs["events"]
	require.NoError(t, b.snapshotAll(t, src))
	b.markSynced(t, src, b.pending(t, src))

	// Through the table and through partitions, one and two levels down.
	b.exec(t, `INSERT INTO events VALUES (2, 'a'), (120, 'b'), (160, 'c')`)
	b.exec(t, `INSERT INTO p1 VALUES (3, 'direct')`)
	b.exec(t, `INSERT INTO p2b VALUES (170, 'direct')`)
	b.exec(t, `UPDATE p2a SET v = 'u' WHERE id = 120`)
	b.exec(t, `DELETE FROM p1 WHERE id = 2`)
	b.exec(t, `DELETE FROM p2b WHERE id = 160`)
	b.exec(t, `UPDATE events SET id = 199 WHERE id = 3`) // to another partition
	b.exec(t, `UPDATE p2a SET id = 121 WHERE id = 120`)  // a new key, same partition
	require.Equal(t, []string{"2:deleted", "3:deleted", "120:deleted", "121", "160:deleted", "170", "199"}, b.pendingState(t, src))
	b.markSynced(t, src, b.pending(t, src))

	// A partition created and one attached after migrate: row triggers are
	// cloned to both, the TRUNCATE trigger is not yet.
	b.exec(t, `CREATE TABLE p3 PARTITION OF events FOR VALUES FROM (200) TO (300)`)
	b.exec(t, `CREATE TABLE p4 (id bigint NOT NULL, v text)`)
	b.exec(t, `INSERT INTO p4 VALUES (300, 'brought')`)
	b.exec(t, `ALTER TABLE events ATTACH PARTITION p4 FOR VALUES FROM (300) TO (400)`)
	b.exec(t, `INSERT INTO p3 VALUES (201, 'new'), (202, 'new')`)
	b.exec(t, `INSERT INTO events VALUES (301, 'new')`)
	b.exec(t, `DELETE FROM p4 WHERE id = 301`)
	require.Equal(t, []string{"201", "202", "301:deleted"}, b.pendingState(t, src))
	b.markSynced(t, src, b.pending(t, src))
	gaps, err := sources.UncapturedPartitions(ctx, b.pool, src)
	require.NoError(t, err)
	require.Equal(t, []string{b.schema + ".p3", b.schema + ".p4"}, gaps)
	stats, err := sources.Stats(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, gaps, stats[0].Uncaptured, "status names them")
	require.Contains(t, stats[0].Warning(), "run syncer migrate")

	// TRUNCATE of a partition with its trigger: its rows, once each.
	b.exec(t, `INSERT INTO p1 VALUES (4, 'x'), (5, 'y')`)
	b.markSynced(t, src, b.pending(t, src))
	b.exec(t, `TRUNCATE p1`)
	require.Equal(t, []string{"1:deleted", "4:deleted", "5:deleted"}, b.pendingState(t, src))
	b.markSynced(t, src, b.pending(t, src))

	// migrate closes the gaps, and restarts the snapshot for p4's row.
	res, _ = b.install(t, file)
	require.Equal(t, sources.Updated, res.Changes[0].Action)
	require.Equal(t, "TRUNCATE now captured on partitions "+b.schema+".p3, "+b.schema+".p4: snapshot restarted for their rows", res.Changes[0].Detail)
	gaps, err = sources.UncapturedPartitions(ctx, b.pool, src)
	require.NoError(t, err)
	require.Empty(t, gaps)
	stats, err = sources.Stats(ctx, b.pool)
	require.NoError(t, err)
	require.Empty(t, stats[0].Uncaptured)
	require.NoError(t, b.snapshotAll(t, src))
	require.Equal(t, []string{"121", "170", "199", "201", "202", "300"}, b.pendingState(t, src))
	b.markSynced(t, src, b.pending(t, src))
	res, _ = b.install(t, file)
	require.Equal(t, sources.Unchanged, res.Changes[0].Action, "idempotent")

	// TRUNCATE of the whole table: every row once, whichever trigger logs
	// it.
	before := b.count(t, `SELECT count(*) FROM syncer_changes`)
	b.exec(t, `TRUNCATE events`)
	require.Equal(t, []string{"121:deleted", "170:deleted", "199:deleted", "201:deleted", "202:deleted", "300:deleted"}, b.pendingState(t, src))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM syncer_changes`)-before, "each row logged once")

	// Uninstalled: no trigger left on the table or any partition, or on one
	// detached since, nor the function.
	b.exec(t, `ALTER TABLE events DETACH PARTITION p3`)
	b.exec(t, `CREATE TABLE other (id bigint PRIMARY KEY)`)
	b.install(t, "  - table: other\n    key: id\n    destination: crm\n")
	require.Zero(t, b.count(t, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'syncer%' AND tgrelid IN (SELECT relid FROM pg_partition_tree('events') UNION ALL SELECT 'p3'::regclass)`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM pg_proc WHERE proname LIKE 'syncer_capture_%' AND pronamespace = current_schema()::regnamespace`))
}

// A statement of many rows on a partitioned table appends one outbox
// event per transaction while the gate is open, not one a row.
func TestPartitionedOutboxEventOncePerTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE events (id bigint PRIMARY KEY) PARTITION BY RANGE (id)`)
	b.exec(t, `CREATE TABLE p1 PARTITION OF events FOR VALUES FROM (0) TO (1000)`)
	b.install(t, "  - table: events\n    key: id\n    destination: crm\n    snapshot: false\n")
	b.exec(t, `DELETE FROM syncer_outbox`)
	b.exec(t, `UPDATE syncer_gate SET armed = true, lease_until = now() + interval '1 hour'`)
	b.exec(t, `INSERT INTO events SELECT generate_series(1, 100)`)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, sql := range []string{`INSERT INTO p1 VALUES (101)`, `UPDATE events SET id = id + 500 WHERE id <= 10`, `DELETE FROM p1 WHERE id = 50`} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM syncer_outbox WHERE op = 'source:events'`), "one event a transaction")
	b.exec(t, `UPDATE syncer_gate SET armed = false`)
	b.exec(t, `INSERT INTO events VALUES (900)`)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM syncer_outbox`), "none while the gate is shut")
	require.Equal(t, 100+1+20+1+1, b.count(t, `SELECT count(*) FROM syncer_changes`))
}

// snapshotAll runs the source's snapshot to its end.
func (b *bundle) snapshotAll(t *testing.T, src *sources.Source) error {
	t.Helper()
	for {
		done, err := sources.Snapshot(context.Background(), b.pool, src, 2)
		if err != nil || done {
			return err
		}
	}
}

// Issue 24, point 4 (the 6): a source's table dropped, renamed,
// re-created without its triggers, or with them disabled, captures
// nothing and so sends no change: Check says so, naming what happened,
// and CaptureBrokenSQL finds those sources for the relay's poll; a
// healthy source passes both.
func TestCheckFindsLostCapture(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var file strings.Builder
	for _, n := range []string{"dropped", "renamed", "disabled", "recreated", "healthy"} {
		b.exec(t, `CREATE TABLE `+n+` (id bigint PRIMARY KEY)`)
		file.WriteString("  - table: " + n + "\n    key: id\n    destination: crm\n")
	}
	b.exec(t, `CREATE TABLE parted (id bigint PRIMARY KEY) PARTITION BY RANGE (id)`)
	b.exec(t, `CREATE TABLE parted1 PARTITION OF parted FOR VALUES FROM (0) TO (10)`)
	file.WriteString("  - table: parted\n    key: id\n    destination: crm\n")
	_, srcs := b.install(t, file.String())
	for name, src := range srcs {
		require.NoError(t, sources.Check(ctx, b.pool, src), name)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_sources s WHERE `+sources.CaptureBrokenSQL))

	b.exec(t, `DROP TABLE dropped`)
	b.exec(t, `ALTER TABLE renamed RENAME TO renamed_old`)
	b.exec(t, `ALTER TABLE disabled DISABLE TRIGGER USER`)
	b.exec(t, `DROP TABLE recreated`)
	b.exec(t, `CREATE TABLE recreated (id bigint PRIMARY KEY)`)
	want := map[string]string{
		"dropped":   "table " + b.schema + ".dropped no longer exists",
		"renamed":   "table " + b.schema + ".renamed was renamed to " + b.schema + ".renamed_old",
		"disabled":  "table " + b.schema + ".disabled has no enabled capture trigger of this source",
		"recreated": "table " + b.schema + ".recreated has no enabled capture trigger of this source",
	}
	for name, text := range want {
		err := sources.Check(ctx, b.pool, srcs[name])
		require.ErrorIs(t, err, sources.ErrSchemaChanged, name)
		require.ErrorContains(t, err, "sources: source "+name+": "+text, name)
	}
	require.NoError(t, sources.Check(ctx, b.pool, srcs["healthy"]))
	require.NoError(t, sources.Check(ctx, b.pool, srcs["parted"]))
	rows, err := b.pool.Query(ctx, `SELECT name FROM syncer_sources s WHERE `+sources.CaptureBrokenSQL+` ORDER BY name`)
	require.NoError(t, err)
	broken, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"disabled", "dropped", "recreated", "renamed"}, broken)
}
