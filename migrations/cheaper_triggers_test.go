package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/migrations"
)

// writes are statements of the application's writers on resources, each
// its own transaction: through the shut gate, then the open one, single
// and multi-row, an update, a delete of nothing, an id brought back above
// its tombstone, and a delete that meets a tombstone already there (its
// row came back with the triggers off).
var writes = []string{
	`INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"a": 2}'), (3, '{"a": 3}')`,
	`UPDATE resources SET payload = '{"a": 10}' WHERE id = 1`,
	`DELETE FROM resources WHERE id = 2`,
	`UPDATE syncer_gate SET armed = true, lease_until = now() + interval '1 hour'`,
	`INSERT INTO resources (id, payload) VALUES (4, '{"a": 4}')`,
	`INSERT INTO resources (id, payload) VALUES (2, '{"a": 20}')`,
	`DELETE FROM resources WHERE id IN (1, 2)`,
	`DELETE FROM resources WHERE id = 99`,
	`UPDATE resources SET payload = '{"a": 30}' WHERE id = 3`,
	`UPDATE resources SET synced_at = now() WHERE id = 3`,
	`DELETE FROM resources WHERE id = 3`,
	`SET LOCAL session_replication_role = replica; INSERT INTO resources (id, payload, version) VALUES (3, '{"a": 31}', 7)`,
	`DELETE FROM resources WHERE id = 3`,
	`UPDATE syncer_gate SET armed = false`,
	`INSERT INTO resources (id, payload) VALUES (5, '{"a": 5}')`,
	`DELETE FROM resources WHERE id = 4`,
}

// written is what the triggers left of writes: the rows, the tombstones,
// the outbox's events in order and the notifications heard.
func written(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	ctx := t.Context()
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN `+pgx.Identifier{migrations.Channel(schema)}.Sanitize())
	require.NoError(t, err)
	for _, w := range writes {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, w)
			return err
		}), w)
	}
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, version, payload::text, synced_at IS NULL FROM resources ORDER BY id`,
		`SELECT id, version, synced_at IS NULL, failed_at IS NULL FROM syncer_tombstones ORDER BY id`,
		`SELECT op FROM syncer_outbox ORDER BY id`,
	} {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		vals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s\n%v\n", q, vals)
	}
	heard := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := listener.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		heard++
	}
	fmt.Fprintf(&b, "notifications: %d\n", heard)
	return b.String()
}

// Migration 016 makes the triggers of resources cheaper, not different:
// the same writes leave the same rows, tombstones, events and
// notifications as under migration 015's.
func TestCheaperTriggersWriteWhatTheyWrote(t *testing.T) {
	t.Parallel()
	pools := map[int]*pgxpool.Pool{}
	got := map[int]string{}
	for _, last := range []int{15, 0} {
		pool, schema := migratedTo(t, last)
		pools[last] = pool
		got[last] = written(t, pool, schema)
	}
	require.Equal(t, got[15], got[0])
	// The gate open: an event and a notification a statement, one that
	// deleted nothing included; none for synced_at, nor with the triggers
	// off.
	require.Contains(t, got[0], "[[INSERT] [INSERT] [DELETE] [DELETE] [UPDATE] [DELETE] [DELETE]]")
	require.Contains(t, got[0], "notifications: 7")
	// Brought back at 2 above its tombstone 2 and deleted: 4. Brought
	// back with the triggers off at 7 and deleted: above both, 8.
	require.Contains(t, got[0], "[[1 3 true true] [2 4 true true] [3 8 true true] [4 2 true true]]")
}

// The triggers of resources run as syncer's owner and, since 016, pin no
// search_path: a writer whose search_path puts objects of its own before
// pg_catalog's (a now(), a >, a pg_notify...) gets none of them run with
// those privileges, because the bodies name every object explicitly.
func TestTriggersIgnoreTheWritersSearchPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ts := dbtest.NewMigrated(t)
	pool := ts.Pool
	var pinned int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc
		WHERE pronamespace = current_schema()::regnamespace AND prosecdef AND proconfig IS NOT NULL
			AND proname IN ('syncer_resources_inserted', 'syncer_resources_deleted', 'syncer_outbox_append')`).Scan(&pinned))
	require.Zero(t, pinned, "the triggers pin no search_path")

	h := dbtest.NewHostileWriter(t, pool, ts.Name, pgx.Identifier{ts.Name, "resources"}.Sanitize())
	_, err := pool.Exec(ctx, `UPDATE syncer_gate SET armed = true, lease_until = now() + interval '1 hour'`)
	require.NoError(t, err)
	for _, w := range []string{
		`SELECT now() > now()`, // the writer's own objects, run as the writer
		`INSERT INTO resources (id, payload) VALUES (1, '{}'), (2, '{}')`,
		`UPDATE resources SET payload = '{"a": 1}' WHERE id = 1`,
		`DELETE FROM resources WHERE id = 2`,
		`INSERT INTO resources (id, payload) VALUES (2, '{}')`,
		`DELETE FROM resources`,
	} {
		require.NoError(t, h.Run(ctx, pool, w), w)
	}
	var events, tombstones, versions int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM syncer_outbox),
		(SELECT count(*) FROM syncer_tombstones), (SELECT sum(version) FROM syncer_tombstones)`).Scan(&events, &tombstones, &versions))
	require.Equal(t, 5, events)
	require.Equal(t, 2, tombstones)
	require.Equal(t, 3+4, versions, "id 1 updated to 2, deleted: 3; id 2 deleted at 1, back at 1+2, deleted: 4")

	// The hostile objects do raise when syncer's owner runs them: a body
	// that named one unqualified would have failed the writes above.
	require.ErrorContains(t, h.Run(ctx, pool, `RESET ROLE; SELECT now()`), "hijacked as")
}
