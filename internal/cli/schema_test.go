package cli_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// TestSchemaKeepsSyncerOutOfTheApplicationsWay: with --schema, migrate
// puts every table of syncer and River (resources included) in a schema
// of their own and none in the application's, whose tables, named
// unqualified in the configuration, are still found; run exports their
// inserts, updates and deletes from there; status and config check read
// the same schema, and a command pointed at a schema that does not exist
// says to migrate. The destination's token is read from a token_file.
func TestSchemaKeepsSyncerOutOfTheApplicationsWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, false)
	own := b.schema + "_syncer"
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dbtest.URL())
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND application_name = $1`, b.schema)
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{own}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	_, err := b.pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, status text, total numeric(10,2))`)
	require.NoError(t, err)

	// The destination's token comes from a file, as a mounted Secret
	// gives it: the fake refuses any other.
	fake := fakethirdparty.New(fakethirdparty.Config{Token: "s3cr3t-from-a-file"})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "crm-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("s3cr3t-from-a-file\n"), 0o600))
	cfg := filepath.Join(dir, "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`destinations:
  crm:
    url: %s
    token_file: `+tokenFile+`
sources:
  - table: orders
    key: id
    columns: [status, total]
    destination: crm
`, srv.URL)), 0o600))
	db := []string{"--database-url", b.dsn, "--schema", own, "--log-level", "error"}
	cmd := func(args ...string) result { return run(ctx, append(args, db...)...) }

	r := cmd("status")
	require.Equal(t, 1, r.code)
	oneLine(t, r, "schema "+own+" does not exist: database is not migrated: run `syncer migrate`")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("destinations:\n  crm:\n    url: "+srv.URL+"\nsources:\n  - table: invoices\n    key: id\n    destination: crm\n"), 0o600))
	r = cmd("config", "check", "--config", bad)
	require.Equal(t, 1, r.code)
	require.Equal(t, "database: schema "+own+" does not exist: migrate would create it, with every table of syncer's and River's\n"+
		"source invoices: table invoices does not exist (search_path: \""+own+"\", "+b.schema+")\n", r.stdout)

	r = cmd("migrate", "--config", cfg)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "schema "+own+": applied")
	tables := func(schema string) (names []string) {
		rows, err := b.pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1`, schema)
		require.NoError(t, err)
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	require.Equal(t, []string{"orders"}, tables(b.schema), "the application's schema holds its own tables only")
	mine := tables(own)
	for _, want := range []string{"resources", "river_job", "syncer_changes", "syncer_migrations", "syncer_sources"} {
		require.Contains(t, mine, want)
	}
	r = cmd("migrate", "--config", cfg)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "schema "+own+" is up to date\n", r.stdout)
	r = cmd("config", "check", "--config", cfg)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)

	// The application writes as it always did, unqualified.
	_, err = b.pool.Exec(ctx, `INSERT INTO orders SELECT g, 'new', g FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	startDaemon(t, ctx, append([]string{"--config", cfg}, db...)...)
	waitFor := func(what string, ok func(map[string]fakethirdparty.Delivery) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			last := map[string]fakethirdparty.Delivery{}
			for _, d := range fake.Deliveries() {
				last[fmt.Sprint(d.ID)] = d
			}
			if ok(last) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the third party never saw %s: %+v", what, fake.Deliveries())
	}
	waitFor("5 inserted rows", func(m map[string]fakethirdparty.Delivery) bool { return len(m) == 5 })
	_, err = b.pool.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = 2; DELETE FROM orders WHERE id = 3`)
	require.NoError(t, err)
	waitFor("the update and the delete", func(m map[string]fakethirdparty.Delivery) bool {
		return m["3"].Deleted && len(fake.Deliveries()) >= 7
	})

	require.Zero(t, fake.Stats().RequestsByStatus["401"], "the token read from the file, without its newline")
	r = cmd("status")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout+r.stderr, "s3cr3t")
	require.Regexp(t, `(?m)^source orders +`+b.schema+`\.orders to crm: 0 pending`, r.stdout)
	require.Equal(t, []string{"orders"}, tables(b.schema), "nothing of syncer's ever lands in the application's schema")
}
