package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/migrations"
)

// roleDocBlocks returns the SQL blocks of docs/operations.md's "Roles and
// privileges", with the names it uses replaced by the test's: the test runs
// what the page says, so the page cannot drift from what works.
func roleDocBlocks(t *testing.T, names map[string]string) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	text := string(doc)
	start := strings.Index(text, "## Roles and privileges\n")
	require.GreaterOrEqual(t, start, 0, "docs/operations.md has a Roles and privileges section")
	text = text[start+3:]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(text, -1) {
		sql := m[1]
		// Roles first: schema names are words inside them.
		for _, from := range []string{"syncer_owner", "syncer_daemon", "app_writer", "app_owner"} {
			sql = strings.ReplaceAll(sql, from, names[from])
		}
		for _, from := range []string{"syncer", "app"} {
			sql = regexp.MustCompile(`\b`+from+`\b`).ReplaceAllLiteralString(sql, names[from])
		}
		blocks = append(blocks, sql)
	}
	require.Len(t, blocks, 2, "an administrator's block and the owner's")
	return blocks
}

// roleDSN is dsn connecting as role.
func roleDSN(t *testing.T, dsn, role string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.User(role)
	return u.String()
}

func rolePool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func execAll(t *testing.T, pool *pgxpool.Pool, who string, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		_, err := pool.Exec(context.Background(), sql)
		require.NoError(t, err, "as %s: %s", who, sql)
	}
}

// Issue 24, point 3: three roles, as docs/operations.md gives them (the
// test runs the page's statements): the owner migrates, the daemon's role
// owns nothing and exports, the application's writer writes resources and
// a source's table with no privilege on any syncer_* table. On main the
// writer's insert into resources failed: permission denied for table
// syncer_gate.
func TestRolesLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	suffix := hex.EncodeToString(rb[:])
	names := map[string]string{
		"syncer_owner":  "t" + suffix + "_owner",
		"syncer_daemon": "t" + suffix + "_daemon",
		"app_writer":    "t" + suffix + "_writer",
		"app_owner":     "t" + suffix + "_app_owner",
	}
	roles := []string{names["syncer_owner"], names["syncer_daemon"], names["app_writer"], names["app_owner"]}
	admin := rolePool(t, dbtest.URL())
	// Registered before the schema's, so it runs after the schema is
	// dropped: the roles go last.
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dbtest.URL())
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY ($1)`, roles)
		_, _ = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{names["app"]}.Sanitize()+` CASCADE`)
		for _, r := range roles {
			if _, err := conn.Exec(ctx, `DROP OWNED BY `+pgx.Identifier{r}.Sanitize()); err != nil {
				t.Errorf("cleanup: drop owned by %s: %v", r, err)
			}
		}
		for _, r := range roles {
			if _, err := conn.Exec(ctx, `DROP ROLE `+pgx.Identifier{r}.Sanitize()); err != nil {
				t.Errorf("cleanup: drop role %s: %v", r, err)
			}
		}
	})
	dsn, schema := dbtest.NewSchema(t)
	names["syncer"], names["app"] = schema, schema+"_app"
	blocks := roleDocBlocks(t, names)
	q := func(s string) string { return pgx.Identifier{s}.Sanitize() }

	// The application as it is: its owner, its writer, its table.
	execAll(t, admin, "admin",
		`CREATE ROLE `+q(names["app_owner"])+` LOGIN`,
		`CREATE ROLE `+q(names["app_writer"])+` LOGIN`,
		`CREATE SCHEMA `+q(names["app"])+` AUTHORIZATION `+q(names["app_owner"]),
		// The administrator's block creates syncer's schema itself.
		`DROP SCHEMA `+q(schema))
	appOwner := rolePool(t, roleDSN(t, dsn, names["app_owner"]))
	orders := q(names["app"]) + ".orders"
	execAll(t, appOwner, "app owner",
		`CREATE TABLE `+orders+` (id bigint PRIMARY KEY, status text, t text)`,
		`INSERT INTO `+orders+` VALUES (1, 'old', 'x'), (2, 'old', NULL)`,
		`GRANT USAGE ON SCHEMA `+q(names["app"])+` TO `+q(names["app_writer"]),
		`GRANT SELECT, INSERT, UPDATE, DELETE ON `+orders+` TO `+q(names["app_writer"]))

	// The administrator's block, then migrate as the owner (twice: the
	// second changes nothing), then the owner's block.
	execAll(t, admin, "admin", blocks[0])
	fake := fakethirdparty.New(fakethirdparty.Config{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	dest := newDestination(t, fakethirdparty.Config{})
	cfg := sourcesConfig(t, fmt.Sprintf("destinations:\n  one:\n    url: %s\nsources:\n  - {name: orders, table: %s.orders, key: id, destination: one}\n", dest.url, names["app"]), nil)
	owner := rolePool(t, roleDSN(t, dsn, names["syncer_owner"]))
	for i := range 2 {
		var res *sources.InstallResult
		mres, err := migrations.UpThen(ctx, owner, nil, func(ctx context.Context, conn *pgx.Conn) error {
			var err error
			res, err = sources.Install(ctx, conn, cfg.SourceSpecs())
			return err
		})
		require.NoError(t, err, "migrate as the owner")
		if i == 1 {
			require.Empty(t, mres.Applied, "a second migrate changes nothing")
			require.False(t, res.Changed())
		}
	}
	execAll(t, owner, "owner", blocks[1])

	// The writer: resources and its own table, nothing of syncer's.
	writer := rolePool(t, roleDSN(t, dsn, names["app_writer"]))
	var id1, id2, id3 int64
	require.NoError(t, writer.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ('{"n": 1}') RETURNING id`).Scan(&id1))
	require.NoError(t, writer.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ('{"n": 2}') RETURNING id`).Scan(&id2))
	require.NoError(t, writer.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ('{"n": 3}') RETURNING id`).Scan(&id3))
	execAll(t, writer, "writer",
		fmt.Sprintf(`UPDATE resources SET payload = '{"n": 22}' WHERE id = %d`, id2),
		fmt.Sprintf(`DELETE FROM resources WHERE id = %d`, id3),
		`INSERT INTO `+orders+` VALUES (3, 'new', 'y'), (4, 'new', NULL)`,
		`UPDATE `+orders+` SET status = 'paid' WHERE id IN (1, 3)`,
		`DELETE FROM `+orders+` WHERE id = 2`)
	for _, tbl := range []string{"syncer_gate", "syncer_outbox", "syncer_tombstones", "syncer_changes", "syncer_sources"} {
		_, err := writer.Exec(ctx, `SELECT 1 FROM `+tbl+` LIMIT 1`)
		require.ErrorContains(t, err, "permission denied for table "+tbl, "the writer reads nothing of syncer's")
	}
	var writerGrants int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM information_schema.role_table_grants
		WHERE grantee = $1 AND table_schema = $2 AND table_name <> 'resources'`, names["app_writer"], schema).Scan(&writerGrants))
	require.Zero(t, writerGrants, "the writer holds no privilege on a syncer_* table")

	// The daemon's role owns nothing, and exports both.
	var owned int
	require.NoError(t, admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE relowner = $1::regrole)
		+ (SELECT count(*) FROM pg_proc WHERE proowner = $1::regrole) + (SELECT count(*) FROM pg_namespace WHERE nspowner = $1::regrole)`,
		names["syncer_daemon"]).Scan(&owned))
	require.Zero(t, owned, "the daemon's role owns nothing")
	daemonDSN := roleDSN(t, dsn, names["syncer_daemon"])
	b := &bundle{pool: rolePool(t, daemonDSN), dsn: daemonDSN, fake: fake, fakeURL: srv.URL}
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })
	b.waitSourcesDrained(t, "orders")
	b.waitDrained(t, 60*time.Second)

	// What each third party holds is each table.
	waitFor(t, 30*time.Second, "resources exported", func() bool {
		latest := fake.Latest()
		return latest[id1] == 1 && latest[id2] == 2 && latest[id3] == 2
	})
	tombstones := 0
	for _, d := range fake.Deliveries() {
		if d.Deleted {
			tombstones++
			require.Equal(t, id3, d.ID)
		}
	}
	require.Equal(t, 1, tombstones, "one tombstone for resources, the row deleted")
	live, tombs := dest.held(t)
	requireHolds(t, map[string]json.RawMessage{
		"1": json.RawMessage(`{"id": 1, "status": "paid", "t": "x"}`),
		"3": json.RawMessage(`{"id": 3, "status": "paid", "t": "y"}`),
		"4": json.RawMessage(`{"id": 4, "status": "new", "t": null}`),
	}, live, "orders")
	require.Equal(t, map[string]int{"2": 1}, tombs)

	// The story's upkeep as the daemon's role: the requests' key index is
	// the owner's, tidied through the owner's function.
	pruner, err := history.NewPruner(b.pool, nil)
	require.NoError(t, err)
	_, err = pruner.Tidy(ctx)
	require.NoError(t, err, "the daemon's role tidies the story's key index")
	st, err := history.Lookup(ctx, b.pool, "orders", "1", 0)
	require.NoError(t, err)
	require.NotEmpty(t, st.Versions, "and reads a key's story")
	t.Logf("as the daemon's role: resources %d deliveries (%d tombstone); orders %d live rows, tombstones %v",
		len(fake.Deliveries()), tombstones, len(live), tombs)
}
