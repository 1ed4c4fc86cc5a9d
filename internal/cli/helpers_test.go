package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// ordersDDL and ordersToCRM are the smallest setup most command tests need: one
// table, orders, exported to a destination crm that nothing listens on.
const (
	ordersDDL   = `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`
	ordersToCRM = "destinations:\n  crm:\n    url: http://127.0.0.1:1\nsources:\n  - {table: orders, key: id, destination: crm, snapshot: false}\n"
)

// setupConfigured returns an empty schema in which ddl has made the
// source tables and syncer migrate has taken the configuration yaml, so
// that the command under test finds its sources and destinations.
func setupConfigured(t *testing.T, ddl, yaml string) *bundle {
	t.Helper()
	ctx := context.Background()
	b := setup(t, false)
	_, err := b.pool.Exec(ctx, ddl)
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))
	r := run(ctx, "migrate", "--database-url", b.dsn, "--config", cfg, "--log-level", "error")
	require.Equal(t, 0, r.code, r.stderr)
	return b
}

// twoTenants is a daemon exporting the source orders of two tenants, acme
// (odd ids) and globex (even ids), each to its own account at the fake,
// found through the connections table.
type twoTenants struct {
	b        *bundle
	args     []string // --database-url, the flags given and --config
	migrated result   // what syncer migrate said
}

// startTwoTenants installs the tenants configuration whose destination crm
// has the extra YAML dest (indented under crm), migrates, fills orders
// with 20 rows and runs a daemon with flags until fake holds each
// tenant's 10. Stopped at cleanup, the daemon must not have printed a
// token.
func startTwoTenants(t *testing.T, ctx context.Context, fake *fakethirdparty.Server, url, dest string, flags ...string) *twoTenants {
	t.Helper()
	b := setup(t, false)
	_, err := b.pool.Exec(ctx, `CREATE TABLE orders (id integer PRIMARY KEY, account text NOT NULL, status text NOT NULL);
		CREATE TABLE connections (account text PRIMARY KEY, url text NOT NULL, token text NOT NULL)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO connections VALUES ('acme', $1 || '/t/acme', $2 || 'acme'), ('globex', $1 || '/t/globex', $2 || 'globex')`,
		url, tenantToken)
	require.NoError(t, err)
	yaml := fmt.Sprintf(`destinations:
  crm:
    url: %s/t/{tenant}
%s    tenants:
      query: SELECT url, token FROM connections WHERE account = $1
sources:
  - {table: orders, key: id, destination: crm, tenant: account, lanes: 4, columns: [id, status]}
`, url, dest)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))
	tt := &twoTenants{b: b, args: append(append([]string{"--database-url", b.dsn}, flags...), "--config", cfg)}
	tt.migrated = run(ctx, append([]string{"migrate"}, tt.args...)...)
	require.Equal(t, 0, tt.migrated.code, tt.migrated.stderr)
	_, err = b.pool.Exec(ctx, `INSERT INTO orders SELECT g, CASE WHEN g % 2 = 1 THEN 'acme' ELSE 'globex' END, 'new'
		FROM generate_series(1, 20) g`)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() { done <- run(runCtx, append([]string{"run", "--http-addr", "off"}, tt.args...)...) }()
	t.Cleanup(func() {
		stop()
		r := <-done
		require.NotContains(t, r.stdout+r.stderr, tenantToken, "the daemon's output holds no token")
	})
	require.Eventually(t, func() bool {
		return len(fake.TenantDeliveries("acme")) == 10 && len(fake.TenantDeliveries("globex")) == 10
	}, 30*time.Second, 50*time.Millisecond)
	return tt
}

// startDaemon runs syncer run, without its HTTP server, with args in this
// process until the test ends.
func startDaemon(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() { done <- run(runCtx, append([]string{"run", "--http-addr", "off"}, args...)...) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
}

// setupSynced returns a migrated schema with n resources rows marked
// synced, as if exported: verify has nothing pending to wait for.
func setupSynced(t *testing.T, n int) *bundle {
	t.Helper()
	b := setup(t, true)
	b.fill(t, n)
	_, err := b.pool.Exec(context.Background(), `UPDATE resources SET synced_at = now()`)
	require.NoError(t, err)
	return b
}
