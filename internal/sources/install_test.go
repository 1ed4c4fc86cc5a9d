package sources_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/sources"
)

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
	ok, err := sources.AnyPending(ctx, b.pool, "customers", sources.Scope{})
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
