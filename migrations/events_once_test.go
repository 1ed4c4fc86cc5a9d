package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Issue 57, migration 030: a transaction of many statements on resources
// appends one outbox event while the gate is open, not one a statement;
// a savepoint rolled back takes its event with it, and the next
// statement appends it again; the next transaction appends its own.
func TestResourcesEventOncePerTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := migratedTo(t, 0)
	for _, sql := range []string{
		`UPDATE syncer_gate SET armed = true, lease_until = now() + interval '1 hour'`,
		`DELETE FROM syncer_outbox`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	events := func() int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM syncer_outbox`).Scan(&n))
		_, err := pool.Exec(ctx, `DELETE FROM syncer_outbox`)
		require.NoError(t, err)
		return n
	}
	tx := func(stmts ...string) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, s := range stmts {
				if _, err := tx.Exec(ctx, s); err != nil {
					return err
				}
			}
			return nil
		}))
	}

	tx(`INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}')`, `INSERT INTO resources (id, payload) VALUES (2, '{"a": 2}')`,
		`UPDATE resources SET payload = '{"a": 3}' WHERE id = 1`, `DELETE FROM resources WHERE id = 2`)
	require.Equal(t, 1, events(), "one event a transaction")

	tx(`DELETE FROM resources WHERE id = 1`)
	require.Equal(t, 1, events(), "the next transaction appends its own")

	tx(`SAVEPOINT s`, `INSERT INTO resources (id, payload) VALUES (3, '{}')`, `ROLLBACK TO SAVEPOINT s`,
		`INSERT INTO resources (id, payload) VALUES (4, '{}')`)
	require.Equal(t, 1, events(), "the statement after a rolled-back savepoint appends it again")

	tx(`INSERT INTO resources (id, payload) VALUES (2, '{}')`)
	var version int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT version FROM resources WHERE id = 2`).Scan(&version))
	require.Greater(t, version, int64(1), "a reinsert still takes its tombstone's version")
	require.Equal(t, 1, events())
}
