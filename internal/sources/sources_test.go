package sources_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

type bundle struct {
	pool   *pgxpool.Pool
	schema string
}

// setup returns a migrated schema of its own.
func setup(t *testing.T) *bundle {
	t.Helper()
	ts := dbtest.NewMigrated(t)
	return &bundle{pool: ts.Pool, schema: ts.Name}
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// tableAndPartitioned runs f twice, in parallel subtests, each on a schema
// of its own holding table with columns cols: "table", a plain table, and
// "partitioned", one range-partitioned by id into two partitions split
// at 100: what capture does must hold on both.
func tableAndPartitioned(t *testing.T, table, cols string, f func(t *testing.T, b *bundle)) {
	t.Helper()
	q := pgx.Identifier{table}.Sanitize()
	for _, tc := range []struct{ name, ddl string }{
		{"table", `CREATE TABLE ` + q + ` ` + cols},
		{"partitioned", `CREATE TABLE ` + q + ` ` + cols + ` PARTITION BY RANGE (id);
			CREATE TABLE ` + pgx.Identifier{table + "_low"}.Sanitize() + ` PARTITION OF ` + q + ` FOR VALUES FROM (MINVALUE) TO (100);
			CREATE TABLE ` + pgx.Identifier{table + "_high"}.Sanitize() + ` PARTITION OF ` + q + ` FOR VALUES FROM (100) TO (MAXVALUE)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.exec(t, tc.ddl)
			f(t, b)
		})
	}
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n), sql)
	return n
}

// config parses a file of the given sources, all to one destination.
func parse(t *testing.T, sourcesYAML string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("destinations:\n  crm:\n    url: http://127.0.0.1:1\nsources:\n"+sourcesYAML), nil)
	require.NoError(t, err)
	return cfg
}

// install installs the sources and returns them, resolved, by name.
func (b *bundle) install(t *testing.T, sourcesYAML string) (*sources.InstallResult, map[string]*sources.Source) {
	t.Helper()
	ctx := context.Background()
	cfg := parse(t, sourcesYAML)
	res, err := sources.Install(ctx, b.pool, cfg.SourceSpecs())
	require.NoError(t, err)
	srcs, err := sources.Resolve(ctx, b.pool, cfg.SourceSpecs())
	require.NoError(t, err)
	out := map[string]*sources.Source{}
	for _, s := range srcs {
		out[s.Name] = s
	}
	return res, out
}

// pending reads every pending item, in batches of two so the keyset
// cursor is exercised.
func (b *bundle) pending(t *testing.T, src *sources.Source) []sources.Row {
	t.Helper()
	var out []sources.Row
	after, first := "", true
	for {
		p, err := sources.Pending(context.Background(), b.pool, src, after, first, feed.Limits{Items: 2}.WithDefaults())
		require.NoError(t, err)
		rows := p.Rows
		if len(rows) == 0 {
			return out
		}
		// A page that says it reached the end is followed by nothing (no
		// test writes while this reads), and a short one says so.
		require.Equal(t, len(rows) < 2, p.End, "a page of %d keys under a limit of 2", len(rows))
		if p.End {
			next, err := sources.Pending(context.Background(), b.pool, src, rows[len(rows)-1].Key, false, feed.Limits{Items: 2}.WithDefaults())
			require.NoError(t, err)
			require.Empty(t, next.Rows, "after a page that said it reached the end")
		}
		out = append(out, rows...)
		after, first = rows[len(rows)-1].Key, false
	}
}

func keys(rows []sources.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Key
	}
	return out
}

// write runs a statement that writes a source's table, in a transaction of
// its own, and returns when that transaction began: the capture time of
// the versions it writes (syncer_changes.changed_at).
func (b *bundle) write(t *testing.T, sql string, args ...any) time.Time {
	t.Helper()
	ctx := context.Background()
	var at time.Time
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT now()`).Scan(&at)
	}), sql)
	require.False(t, at.IsZero())
	return at
}

func (b *bundle) markSynced(t *testing.T, src *sources.Source, rows []sources.Row) {
	t.Helper()
	var ks []string
	var vs []int64
	for _, r := range rows {
		ks = append(ks, r.Key)
		vs = append(vs, r.Version)
	}
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		return sources.MarkSynced(context.Background(), tx, src, ks, vs)
	}))
}

func TestBigintKeysColumnListAndVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text, total numeric, secret text)`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    columns: [status, total]\n    destination: crm\n    snapshot: false\n")
	src := srcs["orders"]
	require.Equal(t, sources.KeyInteger, src.Kind)

	inserted := b.write(t, `INSERT INTO orders VALUES (10, 'new', 1.5, 'x'), (2, 'new', 2, 'x'), (-5, 'new', 3, 'x'), (100, 'paid', 4, 'x'), (1, 'new', 5, 'x')`)
	rows := b.pending(t, src)
	require.Equal(t, []string{"-5", "1", "2", "10", "100"}, keys(rows), "integer keys in numeric order")
	for _, r := range rows {
		require.False(t, r.Deleted)
		require.True(t, inserted.Equal(r.Captured), "captured when the insert's transaction began: %v, not %v", inserted, r.Captured)
		var p map[string]any
		require.NoError(t, json.Unmarshal(r.Payload, &p))
		require.Len(t, p, 2, "only the configured columns: %s", r.Payload)
		require.Contains(t, p, "status")
		require.Contains(t, p, "total")
	}
	require.JSONEq(t, `{"status": "paid", "total": 4}`, string(rows[4].Payload))
	b.markSynced(t, src, rows)
	require.Empty(t, b.pending(t, src))

	// Update, delete, re-insert: every version above the one before.
	last := rows[3].Version // key 10
	step := func(sql string, deleted bool) {
		t.Helper()
		at := b.write(t, sql)
		got := b.pending(t, src)
		require.Len(t, got, 1, sql)
		require.Equal(t, "10", got[0].Key)
		require.Greater(t, got[0].Version, last, sql)
		require.Equal(t, deleted, got[0].Deleted, sql)
		require.True(t, at.Equal(got[0].Captured), "%s: captured %v, not %v", sql, at, got[0].Captured)
		if deleted {
			require.Nil(t, got[0].Payload)
		} else {
			require.NotNil(t, got[0].Payload)
		}
		last = got[0].Version
		b.markSynced(t, src, got)
	}
	step(`UPDATE orders SET status = 'paid' WHERE id = 10`, false)
	step(`DELETE FROM orders WHERE id = 10`, true)
	step(`INSERT INTO orders VALUES (10, 'again', 1, 'x')`, false)
	// An update that changes no exported column logs nothing (issue 45);
	// one that does, does.
	b.exec(t, `UPDATE orders SET secret = 'y' WHERE id = 10`)
	b.exec(t, `UPDATE orders SET status = status WHERE id = 10`)
	require.Empty(t, b.pending(t, src))
	step(`UPDATE orders SET total = 1.0 WHERE id = 10`, false)

	// Two changes of a key read as one version: captured at the newer.
	b.write(t, `UPDATE orders SET status = 'x' WHERE id = 10`)
	newer := b.write(t, `UPDATE orders SET status = 'y' WHERE id = 10`)
	got := b.pending(t, src)
	require.Len(t, got, 1)
	require.True(t, newer.Equal(got[0].Captured), "captured %v, not %v", newer, got[0].Captured)
	b.markSynced(t, src, got)

	// A key changed by an UPDATE: the old key is gone, the new one new.
	b.exec(t, `UPDATE orders SET id = 11 WHERE id = 100`)
	got = b.pending(t, src)
	require.Equal(t, []string{"11", "100"}, keys(got))
	require.False(t, got[0].Deleted)
	require.True(t, got[1].Deleted)
	b.markSynced(t, src, got)

	// TRUNCATE logs every row as deleted.
	b.exec(t, `TRUNCATE orders`)
	got = b.pending(t, src)
	require.Equal(t, []string{"-5", "1", "2", "10", "11"}, keys(got))
	for _, r := range got {
		require.True(t, r.Deleted)
	}
}

func TestTextKeysWholeRowAndAddedColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE "Customers" (code varchar(20) PRIMARY KEY, name text)`)
	_, srcs := b.install(t, "  - table: Customers\n    key: code\n    destination: crm\n")
	src := srcs["Customers"]
	require.Equal(t, sources.KeyText, src.Kind)

	b.exec(t, `INSERT INTO "Customers" VALUES ('b', 'B'), ('a', 'A'), ('B', 'upper'), ('é', 'e'), ('a b''c', 'odd')`)
	rows := b.pending(t, src)
	require.Equal(t, []string{"B", "a", "a b'c", "b", "é"}, keys(rows), "text keys in byte order")
	require.JSONEq(t, `{"code": "a", "name": "A"}`, string(rows[1].Payload), "the whole row")
	b.markSynced(t, src, rows)

	// A column added later appears in later payloads by itself.
	b.exec(t, `ALTER TABLE "Customers" ADD COLUMN tier int DEFAULT 3`)
	b.exec(t, `UPDATE "Customers" SET name = 'A2' WHERE code = 'a'`)
	rows = b.pending(t, src)
	require.Len(t, rows, 1)
	require.JSONEq(t, `{"code": "a", "name": "A2", "tier": 3}`, string(rows[0].Payload))

	// A byte limit cuts the batch but never below one item.
	b.exec(t, `UPDATE "Customers" SET tier = 4`)
	small, err := sources.Pending(context.Background(), b.pool, src, "", true, feed.Limits{Items: 10, Bytes: 1}.WithDefaults())
	require.NoError(t, err)
	require.Len(t, small.Rows, 1)
	require.False(t, small.End, "the byte limit left keys out")
}

func TestUUIDKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE accounts (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), n int)`)
	_, srcs := b.install(t, "  - table: accounts\n    key: id\n    destination: crm\n    columns: [n]\n")
	src := srcs["accounts"]
	require.Equal(t, sources.KeyUUID, src.Kind)
	b.exec(t, `INSERT INTO accounts (n) SELECT g FROM generate_series(1, 7) g`)
	rows := b.pending(t, src)
	require.Len(t, rows, 7)
	var want []string
	q, err := b.pool.Query(context.Background(), `SELECT id::text FROM accounts ORDER BY id`)
	require.NoError(t, err)
	want, err = pgx.CollectRows(q, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, want, keys(rows), "uuid keys in uuid order")
	b.exec(t, `DELETE FROM accounts WHERE id = $1::uuid`, rows[3].Key)
	rows = b.pending(t, src)
	require.True(t, rows[3].Deleted)
}

func TestRolledBackWritesLogNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	b.exec(t, `INSERT INTO orders VALUES (1, 'old')`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    destination: crm\n    snapshot: false\n")
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO orders VALUES (2, 'new')`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE orders SET status = 'x' WHERE id = 1`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `DELETE FROM orders WHERE id = 1`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	any, err := sources.AnyPending(ctx, b.pool, "orders", sources.Scope{})
	require.NoError(t, err)
	require.False(t, any)
	require.Empty(t, b.pending(t, srcs["orders"]))
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_changes`))
}

func TestMarksCoverOnlyTheVersionSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id int PRIMARY KEY, status text)`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	src := srcs["orders"]
	b.exec(t, `INSERT INTO orders VALUES (1, 'a'), (2, 'b'), (3, 'c')`)
	sent := b.pending(t, src)
	require.Len(t, sent, 3)

	// Key 1 changes while its batch is in flight: its mark must not apply.
	b.exec(t, `UPDATE orders SET status = 'a2' WHERE id = 1`)
	b.markSynced(t, src, sent)
	left := b.pending(t, src)
	require.Len(t, left, 1)
	require.Equal(t, "1", left[0].Key)
	require.Greater(t, left[0].Version, sent[0].Version)
	require.JSONEq(t, `{"id": 1, "status": "a2"}`, string(left[0].Payload))

	// Rejected: not pending, counted failed, until a later change.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return sources.MarkFailed(ctx, tx, src, []string{"1"}, []int64{left[0].Version}, []string{"bad status"})
	}))
	require.Empty(t, b.pending(t, src))
	stat := b.stat(t, "orders")
	require.Equal(t, int64(0), stat.PendingKeys)
	require.Equal(t, int64(1), stat.FailedKeys)
	fails, err := sources.RecentFailures(ctx, b.pool, "orders", 10)
	require.NoError(t, err)
	require.Equal(t, []sources.Failure{{Key: "1", Version: left[0].Version, FailedAt: fails[0].FailedAt, Error: "bad status"}}, fails)

	b.exec(t, `UPDATE orders SET status = 'a3' WHERE id = 1`)
	again := b.pending(t, src)
	require.Len(t, again, 1)
	require.Greater(t, again[0].Version, left[0].Version)
	stat = b.stat(t, "orders")
	require.Equal(t, int64(1), stat.PendingKeys)
	require.Equal(t, int64(0), stat.FailedKeys, "a failure whose key changed since is not counted")
	b.markSynced(t, src, again)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_source_failures`), "marked synced at a later version: the failure is gone")

	// retry-failed re-queues a failed key at a new, higher version.
	b.exec(t, `UPDATE orders SET status = 'b2' WHERE id = 2`)
	two := b.pending(t, src)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return sources.MarkFailed(ctx, tx, src, []string{"2"}, []int64{two[0].Version}, []string{"no"})
	}))
	require.Empty(t, b.pending(t, src))
	n, err := sources.RetryFailed(ctx, b.pool, "orders", sources.Scope{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	retried := b.pending(t, src)
	require.Len(t, retried, 1)
	require.Equal(t, "2", retried[0].Key)
	require.Greater(t, retried[0].Version, two[0].Version)
	require.Equal(t, int64(0), b.stat(t, "orders").FailedKeys)
}

func (b *bundle) stat(t *testing.T, name string) sources.Stat {
	t.Helper()
	stats, err := sources.Stats(context.Background(), b.pool)
	require.NoError(t, err)
	for _, s := range stats {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no stat of %s in %v", name, stats)
	return sources.Stat{}
}

func TestDroppedColumnOrTableIsASchemaError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text, total int)`)
	b.exec(t, `CREATE TABLE other (id bigint PRIMARY KEY, v text)`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    columns: [status, total]\n    destination: crm\n"+
		"  - table: other\n    key: id\n    destination: crm\n")
	b.exec(t, `INSERT INTO orders VALUES (1, 'a', 1)`)
	b.exec(t, `INSERT INTO other VALUES (1, 'a')`)
	require.Len(t, b.pending(t, srcs["orders"]), 1, "prepared once before the change")

	b.exec(t, `ALTER TABLE orders DROP COLUMN total`)
	_, err := sources.Pending(ctx, b.pool, srcs["orders"], "", true, feed.Limits{Items: 10}.WithDefaults())
	var se *sources.SchemaError
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, sources.ErrSchemaChanged)
	require.Equal(t, "orders", se.Source)
	require.Equal(t, "total", se.Column)
	require.Equal(t, "sources: source orders: column total of "+b.schema+".orders no longer exists: fix the table or the source's configuration and run syncer migrate", err.Error())

	// The other source goes on; a dropped column of a whole-row source
	// just leaves its payloads.
	b.exec(t, `ALTER TABLE other ADD COLUMN w int`)
	b.exec(t, `ALTER TABLE other DROP COLUMN v`)
	rows := b.pending(t, srcs["other"])
	require.Len(t, rows, 1)
	require.JSONEq(t, `{"id": 1, "w": null}`, string(rows[0].Payload))

	// The table gone.
	b.exec(t, `DROP TABLE orders`)
	_, err = sources.Pending(ctx, b.pool, srcs["orders"], "5", false, feed.Limits{Items: 10}.WithDefaults())
	require.ErrorAs(t, err, &se)
	require.Empty(t, se.Column)
	require.Contains(t, err.Error(), "table "+b.schema+".orders no longer exists")
	_, err = sources.Snapshot(ctx, b.pool, srcs["orders"], 10)
	require.ErrorIs(t, err, sources.ErrSchemaChanged)
}

// A prepared statement's first runs get plans made for their values: with a
// thousand keys, marks hashed the whole change log rather than look each
// key up.
func TestMarksLookKeysUpFromTheFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    destination: crm\n    snapshot: false\n")
	src := srcs["orders"]
	b.exec(t, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 100000) g`)
	b.exec(t, `ANALYZE syncer_changes`)

	var seqs []int64
	rows, err := b.pool.Query(ctx, `SELECT seq FROM syncer_changes ORDER BY seq LIMIT 4000`)
	require.NoError(t, err)
	seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	ks := make([]string, len(seqs))
	for i := range seqs {
		ks[i] = strconv.Itoa(i + 1) // inserted in key order, a change each
	}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		// The session's own counters, before they reach the shared
		// statistics (they may still hold the setup's scans).
		seqScans := func() int64 {
			var n int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables
				WHERE relid = 'syncer_changes'::regclass`).Scan(&n))
			return n
		}
		before := seqScans()
		for i := range 3 {
			lo, hi := i*1000, i*1000+1000
			require.NoError(t, sources.MarkSynced(ctx, tx, src, ks[lo:hi], seqs[lo:hi]))
		}
		errs := make([]string, 1000)
		for i := range errs {
			errs[i] = "rejected"
		}
		require.NoError(t, sources.MarkFailed(ctx, tx, src, ks[3000:], seqs[3000:], errs))
		require.Equal(t, before, seqScans(), "no sequential scan of syncer_changes")
		return nil
	}))
	require.Equal(t, 100000-4000, b.count(t, `SELECT count(*) FROM syncer_changes`))
	require.Equal(t, 1000, b.count(t, `SELECT count(*) FROM syncer_source_failures`))
}
