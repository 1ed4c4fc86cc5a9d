package cli_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// checkSetup is a migrated schema with an application's tables, a fake
// third party that answers and a URL where nothing listens.
type checkSetup struct {
	*bundle
	fakeURL, deadURL string
	dir              string
}

func newCheckSetup(t *testing.T, migrated bool) *checkSetup {
	t.Helper()
	b := setup(t, migrated)
	_, err := b.pool.Exec(context.Background(), `
		CREATE TYPE order_status AS ENUM ('new', 'paid');
		CREATE TABLE orders (id bigint PRIMARY KEY, status order_status, total numeric(12,2));
		CREATE TABLE customers (id uuid PRIMARY KEY, name text);
		CREATE TABLE points (id numeric PRIMARY KEY, x int);
		CREATE TABLE pairs (a int, b int, PRIMARY KEY (a, b));
		CREATE VIEW orders_view AS SELECT * FROM orders`)
	require.NoError(t, err)
	srv := httptest.NewServer(fakethirdparty.New(fakethirdparty.Config{}))
	t.Cleanup(srv.Close)
	// A port that was listening and is no more: nothing answers there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	return &checkSetup{bundle: b, fakeURL: srv.URL, deadURL: dead, dir: t.TempDir()}
}

// file writes a configuration of one destination (the fake, token from
// PATH, which every test process has) and the given sources.
func (s *checkSetup) file(t *testing.T, name, destination, sources string) string {
	t.Helper()
	if destination == "" {
		destination = fmt.Sprintf("  crm:\n    url: %s\n    token_env: PATH\n", s.fakeURL)
	}
	path := filepath.Join(s.dir, name)
	require.NoError(t, os.WriteFile(path, []byte("destinations:\n"+destination+"sources:\n"+sources), 0o600))
	return path
}

func (s *checkSetup) check(path string) result {
	return run(context.Background(), "config", "check", "--database-url", s.dsn, "--config", path, "--timeout", "2s")
}

const ordersSource = "  - table: orders\n    key: id\n    columns: [status, total]\n    destination: crm\n"

// TestConfigCheckRules: each rule of `syncer config check` against the
// real PostgreSQL: one line per problem, naming the source or destination,
// exit 1; exit 0 when all is well; nothing changed either way.
func TestConfigCheckRules(t *testing.T) {
	t.Parallel()
	s := newCheckSetup(t, true)
	good := s.file(t, "good.yaml", "", ordersSource)

	// Not installed yet: migrate would install the triggers.
	r := s.check(good)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "source orders: triggers not installed: migrate would install them (run syncer migrate with this file)\n", r.stdout)
	require.Equal(t, "config check: probing destination crm with a HEAD request, no token sent (--no-probe skips it)\n"+
		"syncer: config check: 1 problem\n", r.stderr, "the probe is said")
	r = run(context.Background(), "config", "check", "--database-url", s.dsn, "--config", good, "--no-probe")
	require.Equal(t, "syncer: config check: 1 problem\n", r.stderr, "--no-probe: no probe")

	r = run(context.Background(), "migrate", "--database-url", s.dsn, "--config", good)
	require.Equal(t, 0, r.code, r.stderr)
	r = s.check(good)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Equal(t, good+": 1 sources, 1 destinations: no problem\n", r.stdout)

	tokenFile := filepath.Join(s.dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("\n"), 0o600))
	rules := []struct {
		name        string
		destination string
		sources     string
		want        string
	}{
		{"missing table", "", "  - table: invoices\n    key: id\n    destination: crm\n",
			"source invoices: table invoices does not exist (search_path: " + s.schema + ")"},
		{"not a table", "", "  - table: orders_view\n    key: id\n    destination: crm\n",
			"source orders_view: " + s.schema + ".orders_view is not a table (relkind v)"},
		{"key not the primary key", "", "  - table: customers\n    key: name\n    destination: crm\n",
			"source customers: key: name is not the primary key of " + s.schema + ".customers (its primary key is id)"},
		{"part of a key of two columns", "", "  - table: pairs\n    key: a\n    destination: crm\n",
			"source pairs: key: a is not the primary key of " + s.schema + ".pairs (its primary key is a, b)"},
		{"key of a type a source cannot have", "", "  - table: points\n    key: id\n    destination: crm\n",
			"source points: key: id is of type numeric"},
		{"missing column", "", "  - table: orders\n    key: id\n    columns: [status, totl]\n    destination: crm\n",
			"source orders: columns: " + s.schema + ".orders has no column totl"},
		{"token variable unset", fmt.Sprintf("  crm:\n    url: %s\n    token_env: SYNCER_TEST_NEVER_SET\n", s.fakeURL), ordersSource,
			"destination crm: token_env: environment variable SYNCER_TEST_NEVER_SET is not set or empty (line 4)"},
		{"token file empty", fmt.Sprintf("  crm:\n    url: %s\n    token_file: %s\n", s.fakeURL, tokenFile), ordersSource,
			"destination crm: token_file: " + tokenFile + " is empty (line 4)"},
		{"unreachable URL", fmt.Sprintf("  crm:\n    url: %s\n", s.deadURL), ordersSource,
			"destination crm: url: unreachable: dial tcp " + strings.TrimPrefix(s.deadURL, "http://") + ": connect: connection refused"},
		{"columns changed since migrate", "", "  - table: orders\n    key: id\n    columns: [status]\n    destination: crm\n",
			"source orders: columns changed: migrate would update it (run syncer migrate with this file)"},
		{"a source no longer in the file", "", "  - table: customers\n    key: id\n    destination: crm\n",
			"source orders: installed and no longer in the file: migrate would remove its triggers and pending work"},
		{"changed_at column missing", "", "  - table: orders\n    key: id\n    columns: [status, total]\n    destination: crm\n    changed_at: updated_at\n",
			"source orders: changed_at: " + s.schema + ".orders has no column updated_at"},
		{"changed_at not a time", "", "  - table: orders\n    key: id\n    columns: [status, total]\n    destination: crm\n    changed_at: total\n",
			"source orders: changed_at: total is of type numeric: the time of a row's last change must be a timestamptz, timestamp or date"},
		{"a file that is not valid", "", "  - table: orders\n   key: id\n",
			"not valid YAML: "},
	}
	for i, tt := range rules {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := s.check(s.file(t, fmt.Sprintf("rule%d.yaml", i), tt.destination, tt.sources))
			require.Equal(t, 1, r.code, r.stdout+r.stderr)
			require.Contains(t, r.stdout, tt.want)
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				require.Regexp(t, `^(source|destination|database|/)`, line, "every line names its source or destination")
			}
		})
	}

	// Disabled triggers are triggers not installed as configured.
	_, err := s.pool.Exec(context.Background(), "ALTER TABLE orders DISABLE TRIGGER USER")
	require.NoError(t, err)
	r = s.check(good)
	require.Equal(t, 1, r.code)
	require.Equal(t, "source orders: triggers missing, disabled or of an older syncer: migrate would update it (run syncer migrate with this file)\n", r.stdout)
}

// TestConfigCheckChangesNothing: a database never migrated is reported as
// such, with every source's state, and stays as it was.
func TestConfigCheckChangesNothing(t *testing.T) {
	t.Parallel()
	s := newCheckSetup(t, false)
	ctx := context.Background()
	count := func() (n int) {
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1) + (SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT t.tgisinternal)`, s.schema).Scan(&n))
		return n
	}
	before := count()
	r := s.check(s.file(t, "f.yaml", "", ordersSource+"  - table: customers\n    key: id\n    destination: crm\n"))
	require.Equal(t, 1, r.code)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^database: migrate would apply \d+ River migrations and \d+ of syncer's \(001_resources, `, lines[0])
	require.Equal(t, "source orders: triggers not installed: migrate would install them (run syncer migrate with this file)", lines[1])
	require.Equal(t, "source customers: triggers not installed: migrate would install them (run syncer migrate with this file)", lines[2])
	require.Equal(t, before, count(), "config check created nothing")

	// Without a file it is a usage error.
	r = run(ctx, "config", "check", "--database-url", s.dsn)
	require.Equal(t, 2, r.code)
	oneLine(t, r, "--config (SYNCER_CONFIG) is required")
}
