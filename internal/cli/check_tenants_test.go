package cli_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 43: config check compiles a destination's tenants query and
// on_refresh, changes nothing, and names the destination and the field of
// one that cannot work.
// tenantOrders is ordersSource with a tenant column: only such a source
// may send to a URL with {tenant}.
const tenantOrders = "  - table: orders\n    key: id\n    tenant: account_id\n    columns: [status, total]\n    destination: crm\n"

func TestConfigCheckTenants(t *testing.T) {
	t.Parallel()
	s := newCheckSetup(t, true)
	_, err := s.pool.Exec(context.Background(), `CREATE TABLE crm_connections (account_id bigint PRIMARY KEY, token text, portal_id int);
		INSERT INTO crm_connections VALUES (1, 'tok-secret-1', 7);
		ALTER TABLE orders ADD COLUMN account_id bigint NOT NULL DEFAULT 1`)
	require.NoError(t, err)
	dest := func(query, onRefresh string) string {
		d := fmt.Sprintf("  crm:\n    url: %s/t/{tenant}\n    format: custom\n    tenants:\n      query: %q\n", s.fakeURL, query)
		if onRefresh != "" {
			d += fmt.Sprintf("      on_refresh: %q\n", onRefresh)
		}
		return d
	}
	good := s.check(s.file(t, "good.yaml", dest("SELECT token, portal_id FROM crm_connections WHERE account_id = $1", ""), tenantOrders))
	require.NotContains(t, good.stdout, "tenants", good.stdout+good.stderr)
	require.NotContains(t, good.stderr, "probing destination crm", "a URL with {tenant} is not probed")

	for i, tt := range []struct{ query, onRefresh, want string }{
		{"SELECT token FROM crm_connectionz WHERE account_id = $1", "",
			`destination crm: tenants.query: relation "crm_connectionz" does not exist (at character 19) (line 3)`},
		{"SELECT token, portal_id AS id FROM crm_connections WHERE account_id = $1", "",
			`destination crm: tenants.query: returns column "id", which is $tenant.id, the tenant's value: name it otherwise (line 3)`},
		{"SELECT token FROM crm_connections WHERE account_id = $1", "UPDATE crm_connections SET refresh = $2 WHERE account_id = $1",
			`destination crm: tenants.on_refresh: column "refresh" of relation "crm_connections" does not exist`},
	} {
		r := s.check(s.file(t, fmt.Sprintf("tenants%d.yaml", i), dest(tt.query, tt.onRefresh), tenantOrders))
		require.Equal(t, 1, r.code, r.stdout+r.stderr)
		require.Contains(t, r.stdout, tt.want)
		require.NotContains(t, r.stdout+r.stderr, "tok-secret")
	}
	var token string
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT token FROM crm_connections`).Scan(&token))
	require.Equal(t, "tok-secret-1", token)
}

// Issue 54 point 3: config check runs the query with tenants.timeout, as
// the daemon does: a connections table locked by a migration is named
// within it rather than holding the check; a timeout that is not a
// duration from 100ms to 1m is named.
func TestConfigCheckTenantsTimeout(t *testing.T) {
	t.Parallel()
	s := newCheckSetup(t, true)
	ctx := context.Background()
	_, err := s.pool.Exec(ctx, `CREATE TABLE crm_connections (account_id bigint PRIMARY KEY, token text);
		ALTER TABLE orders ADD COLUMN account_id bigint NOT NULL DEFAULT 1`)
	require.NoError(t, err)
	dest := func(timeout string) string {
		return fmt.Sprintf("  crm:\n    url: %s/t/{tenant}\n    tenants:\n      query: SELECT token FROM crm_connections WHERE account_id = $1\n      timeout: %s\n", s.fakeURL, timeout)
	}
	r := s.check(s.file(t, "bad.yaml", dest("5"), tenantOrders))
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "destination crm: tenants.timeout: must be a duration from 100ms to 1m")

	lock, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	_, err = lock.Exec(ctx, `LOCK TABLE crm_connections IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	done := make(chan result, 1)
	go func() { done <- s.check(s.file(t, "locked.yaml", dest("300ms"), tenantOrders)) }()
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("config check waits for the locked table (the lock is held until the test ends)")
	}
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "destination crm: tenants.query: canceling statement due to")
	require.Contains(t, r.stdout, "it ran past tenants.timeout (300ms): a table it reads is locked, or the query is slow")
}
