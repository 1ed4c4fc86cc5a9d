package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// tenantSecret is what the tenants' rows carry: nothing of it may show.
const tenantSecret = "sk_live_tenantTOKEN_9f8e7d"

// setupTenants migrates a source contacts with a tenant column, to
// destination crm, whose rows carry tokens; acme has 3 pending rows,
// globex 1 (its credentials refused), initech 2 (unconnected), and
// umbrella none (paused by a person).
func setupTenants(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	b := setupConfigured(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, token text, password text, refresh_token text)`,
		"destinations:\n  crm:\n    url: http://127.0.0.1:1\nsources:\n  - {table: contacts, key: id, tenant: account, destination: crm, snapshot: false}\n")
	_, err := b.pool.Exec(ctx, `INSERT INTO contacts SELECT i, (ARRAY['acme','acme','acme','globex','initech','initech'])[i], $1, $1, $1 FROM generate_series(1, 6) i`, tenantSecret)
	require.NoError(t, err)

	store := func(tenant tenant.Tenant) *breakerstore.Store {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", tenant)})
		require.NoError(t, err)
		return s
	}
	_, err = store("globex").SetRefusal(ctx, breakerstore.KeyCredentials, breakerstore.Refusal{Refused: true, Status: 401, Message: "401 Unauthorized"})
	require.NoError(t, err)
	require.NoError(t, store("initech").SetConnection(ctx, breakerstore.Connection{Unconnected: true, Error: "destination crm: tenant initech: tenants: no connection row for the tenant"}))
	_, err = store("umbrella").SetHold(ctx, breakerstore.Hold{Paused: true, By: "command line"})
	require.NoError(t, err)
	return b
}

// Issue 43, contract section 10 "Seen and acted on": status counts a
// source's tenants by state and lists those with the most pending rows;
// --source --tenant shows one; nothing of the rows' secrets shows.
func TestStatusTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTenants(t)

	r := run(ctx, "status", "--json", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, tenantSecret)
	var rep status.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Sources, 1)
	ts := rep.Sources[0].Tenants
	require.NotNil(t, ts)
	require.Equal(t, map[string]int{"ok": 1, "refused": 1, "unconnected": 1, "paused": 1, "limited": 0, "error": 0, "invalid": 0}, ts.Counts)
	require.Equal(t, 1, ts.UnconnectedPending)
	require.Len(t, ts.Top, 3)
	require.Equal(t, "acme", ts.Top[0].Tenant)
	require.EqualValues(t, 3, ts.Top[0].Pending)
	require.Equal(t, "ok", ts.Top[0].State)
	require.Positive(t, ts.Top[0].OldestPendingSeconds+1)
	require.Equal(t, "initech", ts.Top[1].Tenant)
	require.Equal(t, "unconnected", ts.Top[1].State)
	require.Contains(t, ts.Top[1].Error, "no connection row")
	require.Equal(t, "globex", ts.Top[2].Tenant)
	require.Equal(t, "refused", ts.Top[2].State)
	require.Equal(t, "401 Unauthorized", ts.Top[2].Error)

	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, tenantSecret)
	require.Contains(t, r.stdout, "1 ok, 1 unconnected, 1 refused, 1 paused, 0 limited, 0 error, 0 invalid; 1 unconnected with rows waiting")
	require.Regexp(t, `tenant acme +OK: 3 pending, 0 failed`, r.stdout)
	require.Regexp(t, `tenant globex +REFUSED: 1 pending, 0 failed, oldest pending [^:]+: 401 Unauthorized`, r.stdout)

	r = run(ctx, "status", "--json", "--source", "contacts", "--tenant", "umbrella", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	var one status.Tenant
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
	require.Equal(t, status.Tenant{Tenant: "umbrella", State: "paused", Error: "paused by command line"}, one)
	r = run(ctx, "status", "--source", "contacts", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "tenant acme of source contacts to crm: OK: 3 pending, 0 failed")

	r = run(ctx, "status", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 2, r.code, r.stderr)
	r = run(ctx, "status", "--source", "nope", "--tenant", "acme", "--database-url", b.dsn)
	require.NotEqual(t, 0, r.code)
}

// 3,000 tenants: status counts them all and lists ten, from two grouped
// reads of the change log and failures and one of the tenants' facts.
func TestStatusThousandsOfTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTenants(t)
	_, err := b.pool.Exec(ctx, `INSERT INTO contacts SELECT 100 + i, 'tenant-' || i, $1, $1, $1 FROM generate_series(1, 3000) i`, tenantSecret)
	require.NoError(t, err)
	r := run(ctx, "status", "--json", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, tenantSecret)
	var rep status.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	ts := rep.Sources[0].Tenants
	require.Equal(t, 3001, ts.Counts["ok"], "acme and the 3,000")
	require.Len(t, ts.Top, status.TopTenantsDefault)
	require.Equal(t, "acme", ts.Top[0].Tenant)
}
