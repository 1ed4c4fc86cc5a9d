package sources_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
)

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

// A transaction of many statements on a table appends one outbox event
// and sends one notification while the gate is open, not one a statement
// (issue 57); a statement rolled back with its savepoint takes its event
// with it, so the next one makes it again; a transaction that began under
// a shut gate makes it at its first statement after the gate opened.
func TestOutboxEventOncePerTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	b.install(t, "  - table: orders\n    key: id\n    destination: crm\n    snapshot: false\n")
	b.exec(t, `DELETE FROM syncer_outbox`)
	b.exec(t, `UPDATE syncer_gate SET armed = true, lease_until = now() + interval '1 hour'`)
	events := func() int { return b.count(t, `SELECT count(*) FROM syncer_outbox WHERE op = 'source:orders'`) }
	run := func(sqls ...string) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			for _, sql := range sqls {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return err
				}
			}
			return nil
		}))
	}

	run(`INSERT INTO orders VALUES (1, 'a')`, `INSERT INTO orders VALUES (2, 'a')`,
		`UPDATE orders SET status = 'b' WHERE id = 1`, `DELETE FROM orders WHERE id = 2`)
	require.Equal(t, 1, events(), "one event a transaction")
	run(`INSERT INTO orders VALUES (3, 'a')`)
	require.Equal(t, 2, events(), "the next transaction makes its own")

	run(`SAVEPOINT s`, `INSERT INTO orders VALUES (4, 'a')`, `ROLLBACK TO SAVEPOINT s`, `INSERT INTO orders VALUES (5, 'a')`)
	require.Equal(t, 3, events(), "a rolled-back savepoint takes its event, the next statement makes it again")

	b.exec(t, `UPDATE syncer_gate SET armed = false`)
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO orders VALUES (6, 'a')`)
	require.NoError(t, err)
	b.exec(t, `UPDATE syncer_gate SET armed = true`)
	// The writer's snapshot is taken at its first statement (read
	// committed: at each): the gate reads open at the second.
	_, err = tx.Exec(ctx, `INSERT INTO orders VALUES (7, 'a')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 4, events(), "the first statement after the gate opened makes the event")
	require.Equal(t, 1+1+1+1+1+1+1+1, b.count(t, `SELECT count(*) FROM syncer_changes`), "every change logged")
}
