package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewRole creates a login role named after schema whose sessions start
// with schema on their search_path (ALTER ROLE ... SET), as a pooler in
// transaction mode needs: it passes no search_path in the startup packet,
// and a session setting would stay on its server session. The role is a
// superuser, so it may end the sessions of the test's other role (a
// takeover's), and is dropped when the test ends, after whatever the test
// registered later (a PgBouncer holding its sessions) is gone.
func NewRole(tb testing.TB, schema string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		tb.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	role := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN SUPERUSER"); err != nil {
		tb.Fatalf("dbtest: create role: %v", err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE "+role+" SET search_path = "+role); err != nil {
		tb.Fatalf("dbtest: role's search_path: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, URL())
		if err != nil {
			tb.Errorf("dbtest: connect for cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = $1`, schema)
		_, _ = conn.Exec(ctx, "DROP OWNED BY "+role)
		if _, err := conn.Exec(ctx, "DROP ROLE "+role); err != nil {
			tb.Errorf("dbtest: drop role %s: %v", schema, err)
		}
	})
	return schema
}
