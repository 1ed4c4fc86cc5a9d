package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Issue 45, migration 018: an UPDATE of resources that leaves every
// payload as it was appends no outbox event, with the gate open; one that
// changes a payload appends one, in a transaction whose other statements
// change nothing too, and a rolled-back savepoint takes its change back.
func TestUnchangedPayloadAppendsNoEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := migratedTo(t, 0)

	for _, sql := range []string{
		`INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"a": 2}')`,
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

	tx(`UPDATE resources SET payload = payload`)
	tx(`UPDATE resources SET payload = '{"a": 1}' WHERE id = 1`)
	require.Zero(t, events(), "no payload changed")

	tx(`UPDATE resources SET payload = '{"a": 3}' WHERE id = 1`, `UPDATE resources SET payload = payload`)
	require.Equal(t, 1, events(), "the changing statement's event only")

	tx(`UPDATE resources SET payload = payload`, `UPDATE resources SET payload = '{"a": 4}' WHERE id = 2`)
	require.Equal(t, 1, events())

	tx(`SAVEPOINT s`, `UPDATE resources SET payload = '{"a": 5}' WHERE id = 2`, `ROLLBACK TO SAVEPOINT s`,
		`UPDATE resources SET payload = payload`)
	require.Zero(t, events(), "the change was rolled back")

	var versions []int64
	rows, err := pool.Query(ctx, `SELECT version FROM resources ORDER BY id`)
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{2, 2}, versions, "a version a payload change")
}
