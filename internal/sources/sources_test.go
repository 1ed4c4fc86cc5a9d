package sources_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

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
		p, err := sources.Pending(context.Background(), b.pool, src, after, first, feed.Limits{Items: 2})
		require.NoError(t, err)
		rows := p.Rows
		if len(rows) == 0 {
			return out
		}
		// A page that says it reached the end is followed by nothing (no
		// test writes while this reads), and a short one says so.
		require.Equal(t, len(rows) < 2, p.End, "a page of %d keys under a limit of 2", len(rows))
		if p.End {
			next, err := sources.Pending(context.Background(), b.pool, src, rows[len(rows)-1].Key, false, feed.Limits{Items: 2})
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

	b.exec(t, `INSERT INTO orders VALUES (10, 'new', 1.5, 'x'), (2, 'new', 2, 'x'), (-5, 'new', 3, 'x'), (100, 'paid', 4, 'x'), (1, 'new', 5, 'x')`)
	rows := b.pending(t, src)
	require.Equal(t, []string{"-5", "1", "2", "10", "100"}, keys(rows), "integer keys in numeric order")
	for _, r := range rows {
		require.False(t, r.Deleted)
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
		b.exec(t, sql)
		got := b.pending(t, src)
		require.Len(t, got, 1, sql)
		require.Equal(t, "10", got[0].Key)
		require.Greater(t, got[0].Version, last, sql)
		require.Equal(t, deleted, got[0].Deleted, sql)
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
	// An update that changes no exported column still logs a change.
	step(`UPDATE orders SET secret = 'y' WHERE id = 10`, false)
	step(`UPDATE orders SET status = status WHERE id = 10`, false)

	// A key changed by an UPDATE: the old key is gone, the new one new.
	b.exec(t, `UPDATE orders SET id = 11 WHERE id = 100`)
	got := b.pending(t, src)
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
	small, err := sources.Pending(context.Background(), b.pool, src, "", true, feed.Limits{Items: 10, Bytes: 1})
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
	any, err := sources.AnyPending(ctx, b.pool, "orders")
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
	n, err := sources.RetryFailed(ctx, b.pool, "orders")
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

// triggers lists the triggers on a table with their function.
func (b *bundle) triggers(t *testing.T, table string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT tg.tgname || ' ' || tg.tgfoid::regprocedure::text || ' ' || tg.oid
		FROM pg_trigger tg WHERE tg.tgrelid = to_regclass($1) ORDER BY tg.tgname`, table)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// columns describes a table's columns as information_schema shows them.
func (b *bundle) columns(t *testing.T, table string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, b.schema, table)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func TestInstallIsIdempotentAndRemovesWhatIsNoLongerConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'new')`)
	b.exec(t, `CREATE TABLE customers (id uuid PRIMARY KEY, name text)`)
	ordersCols, customersCols := b.columns(t, "orders"), b.columns(t, "customers")

	const both = "  - table: orders\n    key: id\n    destination: crm\n" +
		"  - table: customers\n    key: id\n    destination: crm\n" +
		"  - name: orders-status\n    table: orders\n    key: id\n    columns: [status]\n    destination: crm\n"
	res, _ := b.install(t, both)
	require.Equal(t, []sources.Change{
		{Source: "orders", Action: sources.Installed},
		{Source: "customers", Action: sources.Installed},
		{Source: "orders-status", Action: sources.Installed},
	}, res.Changes)
	trOrders, trCustomers := b.triggers(t, "orders"), b.triggers(t, "customers")
	require.Len(t, trOrders, 8, "four triggers a source, two sources on orders")
	require.Len(t, trCustomers, 4)

	res, _ = b.install(t, both)
	require.False(t, res.Changed(), "%v", res.Changes)
	require.Equal(t, trOrders, b.triggers(t, "orders"), "the same triggers, not replaced")
	require.Equal(t, trCustomers, b.triggers(t, "customers"))
	require.Equal(t, ordersCols, b.columns(t, "orders"), "no column added or changed")
	require.Equal(t, customersCols, b.columns(t, "customers"))

	// A disabled trigger is put back.
	b.exec(t, `ALTER TABLE customers DISABLE TRIGGER ALL`)
	res, _ = b.install(t, both)
	require.Equal(t, sources.Updated, res.Changes[1].Action)
	b.exec(t, `INSERT INTO customers VALUES (gen_random_uuid(), 'x')`)
	ok, err := sources.AnyPending(ctx, b.pool, "customers")
	require.NoError(t, err)
	require.True(t, ok)

	// customers and orders-status leave the file: their triggers, function,
	// pending changes and row go; orders keeps its own.
	res, _ = b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	require.ElementsMatch(t, []sources.Change{
		{Source: "orders", Action: sources.Unchanged},
		{Source: "customers", Action: sources.Removed},
		{Source: "orders-status", Action: sources.Removed},
	}, res.Changes)
	require.Empty(t, b.triggers(t, "customers"))
	require.Len(t, b.triggers(t, "orders"), 4)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_changes WHERE source <> 'orders'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_sources`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM pg_proc WHERE proname LIKE 'syncer\_capture\_%' AND pronamespace = $1::regnamespace`, b.schema))
	b.exec(t, `INSERT INTO customers VALUES (gen_random_uuid(), 'y')`)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_changes WHERE source = 'customers'`))
	require.Equal(t, ordersCols, b.columns(t, "orders"))
	require.Equal(t, customersCols, b.columns(t, "customers"))

	// A source whose table was dropped is removed without complaint.
	b.exec(t, `DROP TABLE orders`)
	res, err = sources.Install(ctx, b.pool, parse(t, "  - table: customers\n    key: id\n    destination: crm\n").SourceSpecs())
	require.NoError(t, err)
	require.ElementsMatch(t, []sources.Change{
		{Source: "customers", Action: sources.Installed},
		{Source: "orders", Action: sources.Removed},
	}, res.Changes)
}

func TestInstallRefusesUnusableTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE nopk (id bigint, v text)`)
	b.exec(t, `CREATE TABLE twopk (a int, b int, PRIMARY KEY (a, b))`)
	b.exec(t, `CREATE TABLE numkey (id numeric PRIMARY KEY)`)
	b.exec(t, `CREATE TABLE good (id int PRIMARY KEY, code text UNIQUE, status text)`)
	b.exec(t, `CREATE VIEW goodview AS SELECT * FROM good`)
	b.exec(t, `CREATE DOMAIN order_no AS bigint`)
	b.exec(t, `CREATE TABLE domainkey (id order_no PRIMARY KEY)`)
	tests := []struct {
		name, yaml, want string
	}{
		{"no table", "  - table: missing\n    key: id\n    destination: crm\n", "source missing: table missing does not exist (search_path: " + b.schema},
		{"no table in schema", "  - table: nowhere.missing\n    key: id\n    destination: crm\n", "source nowhere.missing: table nowhere.missing does not exist"},
		{"no primary key", "  - table: nopk\n    key: id\n    destination: crm\n", "has no primary key: a source needs one (key: id)"},
		{"part of a two-column key", "  - table: twopk\n    key: a\n    destination: crm\n", "key: a is not the primary key of " + b.schema + ".twopk (its primary key is a, b)"},
		{"more than the key", "  - table: twopk\n    key: [a, b, c]\n    destination: crm\n", "key: a, b, c is not the primary key of " + b.schema + ".twopk (its primary key is a, b)"},
		{"numeric key", "  - table: numkey\n    key: id\n    destination: crm\n", "key: id is of type numeric: a key's columns must be integers (smallint, integer, bigint), text, varchar or uuid"},
		{"not the primary key", "  - table: good\n    key: code\n    destination: crm\n", "key: code is not the primary key of " + b.schema + ".good (its primary key is id)"},
		{"missing column", "  - table: good\n    key: id\n    columns: [status, colour, size]\n    destination: crm\n", "columns: " + b.schema + ".good has no column colour, size"},
		{"a view", "  - table: goodview\n    key: id\n    destination: crm\n", "goodview is not a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The good source comes first: nothing is installed when any
			// source is refused.
			_, err := sources.Install(ctx, b.pool, parse(t, "  - name: good-"+strings.ReplaceAll(tt.name, " ", "-")+"\n    table: good\n    key: id\n    destination: crm\n"+tt.yaml).SourceSpecs())
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			var se *sources.SourceError
			require.ErrorAs(t, err, &se)
		})
	}
	// Both problems in one line.
	_, err := sources.Install(ctx, b.pool, parse(t, "  - table: nopk\n    key: id\n    destination: crm\n  - table: numkey\n    key: id\n    destination: crm\n").SourceSpecs())
	require.ErrorContains(t, err, "source nopk: ")
	require.ErrorContains(t, err, "; source numkey: ")
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_sources`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'syncer\_%'`+
		` AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = $1::regnamespace)`, b.schema))

	// A domain over bigint is an integer key.
	_, srcs := b.install(t, "  - table: domainkey\n    key: id\n    destination: crm\n")
	require.Equal(t, sources.KeyInteger, srcs["domainkey"].Kind)
}

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
	_, err := sources.Pending(ctx, b.pool, srcs["orders"], "", true, feed.Limits{Items: 10})
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
	_, err = sources.Pending(ctx, b.pool, srcs["orders"], "5", false, feed.Limits{Items: 10})
	require.ErrorAs(t, err, &se)
	require.Empty(t, se.Column)
	require.Contains(t, err.Error(), "table "+b.schema+".orders no longer exists")
	_, err = sources.Snapshot(ctx, b.pool, srcs["orders"], 10)
	require.ErrorIs(t, err, sources.ErrSchemaChanged)
}

func TestResolveRefusesWhatWasNotInstalled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	_, err := sources.Resolve(ctx, b.pool, parse(t, "  - table: orders\n    key: id\n    columns: [status]\n    destination: crm\n").SourceSpecs())
	require.ErrorIs(t, err, sources.ErrNotInstalled)
	require.ErrorContains(t, err, "source orders: its columns changed")
	_, err = sources.Resolve(ctx, b.pool, parse(t, "  - name: other\n    table: orders\n    key: id\n    destination: crm\n").SourceSpecs())
	require.ErrorIs(t, err, sources.ErrNotInstalled)
	require.ErrorContains(t, err, "source other: not installed")
}

// A writer whose role has no privilege on syncer's tables still writes:
// the capture function runs as its owner.
func TestWritersNeedNoPrivilegeOnSyncersTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	role := pgx.Identifier{b.schema + "_writer"}.Sanitize()
	b.exec(t, `CREATE ROLE `+role)
	t.Cleanup(func() {
		_, _ = b.pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = b.pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	b.exec(t, `GRANT USAGE ON SCHEMA `+pgx.Identifier{b.schema}.Sanitize()+` TO `+role)
	b.exec(t, `GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO `+role)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES (1, 'a')`)
		return err
	}))
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT count(*) FROM syncer_changes`)
		return err
	})
	require.ErrorContains(t, err, "permission denied", "the writer cannot touch syncer's tables itself")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_changes WHERE source = 'orders'`))
}

// The capture functions run as syncer's owner. An unfiltered source's
// pins no search_path: its body names every object explicitly, so a
// writer whose search_path puts objects of its own before pg_catalog's
// (an =, a ||, a to_jsonb, a type text...) gets none of them run with
// those privileges. A filtered source's keeps the pin: its filter is the
// configuration's SQL, unqualified, and its <> stays pg_catalog's.
func TestCaptureIgnoresTheWritersSearchPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	b.exec(t, `CREATE TABLE pairs (a int, b text, PRIMARY KEY (a, b))`)
	b.exec(t, `CREATE TABLE posts (id bigint PRIMARY KEY, status text)`)
	b.install(t, "  - table: orders\n    key: id\n    destination: crm\n    snapshot: false\n"+
		"  - table: pairs\n    key: [a, b]\n    destination: crm\n    snapshot: false\n"+
		"  - table: posts\n    key: id\n    where: status <> 'draft'\n    destination: crm\n    snapshot: false\n")
	pinned := func(table string) bool {
		var p bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT DISTINCT p.proconfig IS NOT NULL FROM pg_trigger tg JOIN pg_proc p ON p.oid = tg.tgfoid
			WHERE tg.tgrelid = to_regclass($1) AND p.prosecdef`, table).Scan(&p))
		return p
	}
	require.False(t, pinned("orders"))
	require.False(t, pinned("pairs"))
	require.True(t, pinned("posts"))

	var tables []string
	for _, tb := range []string{"orders", "pairs", "posts"} {
		tables = append(tables, pgx.Identifier{b.schema, tb}.Sanitize())
	}
	h := dbtest.NewHostileWriter(t, b.pool, b.schema, tables...)
	b.exec(t, `UPDATE syncer_gate SET armed = true, lease_until = now() + interval '1 hour'`)
	for _, w := range []string{
		`INSERT INTO orders VALUES (1, 'a'), (2, 'b')`,
		`UPDATE orders SET id = 3 WHERE id = 2`,
		`DELETE FROM orders WHERE id = 1`,
		`TRUNCATE orders`,
		`INSERT INTO pairs VALUES (1, 'x'), (2, 'y')`,
		`UPDATE pairs SET b = 'z' WHERE a = 2`,
		`DELETE FROM pairs WHERE a = 1`,
		`INSERT INTO posts VALUES (1, 'draft'), (2, 'live')`,
		`UPDATE posts SET status = 'draft' WHERE id = 2`,
		`DELETE FROM posts`,
	} {
		require.NoError(t, h.Run(ctx, b.pool, w), w)
	}
	rows, err := b.pool.Query(ctx, `SELECT source || ' ' || key || ' ' || deleted FROM syncer_changes ORDER BY seq`)
	require.NoError(t, err)
	changes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		"orders 1 false", "orders 2 false", "orders 3 false", "orders 2 true", "orders 1 true", "orders 3 true",
		`pairs [1,"x"] false`, `pairs [2,"y"] false`, `pairs [2,"z"] false`, `pairs [2,"y"] true`, `pairs [1,"x"] true`,
		"posts 2 false", "posts 2 true",
	}, changes)
	require.Equal(t, 9, b.count(t, `SELECT count(*) FROM syncer_outbox`), "an event a statement that logged a change")

	// The writer's objects do raise when syncer's owner runs them.
	require.ErrorContains(t, h.Run(ctx, b.pool, `RESET ROLE; SELECT now()`), "hijacked as")
}

// An event and a notification per statement while the gate is open (armed
// and a relay's lease valid), naming the source; none while it is shut or
// the lease has lapsed.
func TestOutboxEventsThroughTheGate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY)`)
	b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	b.exec(t, `DELETE FROM syncer_outbox`)
	b.exec(t, `UPDATE syncer_gate SET armed = true, lease_until = now() + interval '1 hour'`)
	b.exec(t, `INSERT INTO orders SELECT generate_series(1, 10)`)
	b.exec(t, `DELETE FROM orders WHERE id > 100`) // touches nothing
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_outbox WHERE op = 'source:orders'`))
	b.exec(t, `UPDATE syncer_gate SET armed = false`)
	b.exec(t, `INSERT INTO orders VALUES (11)`)
	b.exec(t, `UPDATE syncer_gate SET armed = true, lease_until = now() - interval '1 second'`)
	b.exec(t, `INSERT INTO orders VALUES (12)`)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_outbox`))
	require.Equal(t, 12, b.count(t, `SELECT count(*) FROM syncer_changes`))
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
