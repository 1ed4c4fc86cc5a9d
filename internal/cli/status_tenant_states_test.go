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

// Issue 54 points 4, 5 and 6 in status, text and JSON: a tenant whose
// query failed is `error` with its SQLSTATE and condition name, one whose
// value is never sent is `invalid` with the reason; a tenant with nothing
// pending or failed and no person's pause is not counted, whatever syncer
// kept of it (a learnt rate, a missing connection row, a refusal).
func TestStatusTenantErrorInvalidAndGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTenants(t)
	_, err := b.pool.Exec(ctx, `INSERT INTO contacts VALUES (10, 'hooli', NULL, NULL, NULL), (11, '..', NULL, NULL, NULL)`)
	require.NoError(t, err)
	// As the daemon's registry writes them (raw, so that the facts read
	// the same whatever this tree's types are).
	fact := func(tenant tenant.Tenant, key, value string) {
		_, err := b.pool.Exec(ctx, `INSERT INTO syncer_state (key, value) VALUES ($1, convert_to($2, 'UTF8'))`,
			breakerstore.TenantNamespace("crm", tenant)+":"+key, value)
		require.NoError(t, err)
	}
	fact("hooli", "connection", `{"unconnected": true, "kind": "error", "error": "destination crm: tenant hooli: tenants.query failed for the tenant: SQLSTATE 22012 division_by_zero"}`)
	fact("..", "connection", `{"unconnected": true, "kind": "invalid", "error": "destination crm: tenant \"..\": tenants: the tenant's value is never sent: it is .., a path segment of its own; its rows wait"}`)
	// Gone: no rows, no pause.
	fact("gone-learnt", "rate", `{"limit": 4}`)
	fact("gone-unconnected", "connection", `{"unconnected": true, "error": "no connection row"}`)
	fact("gone-refused", "credentials", `{"refused": true, "status": 401, "message": "401 Unauthorized"}`)

	r := run(ctx, "status", "--json", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	var rep status.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	ts := rep.Sources[0].Tenants
	require.Equal(t, 1, ts.Counts["error"], "%v", ts.Counts)
	require.Equal(t, 1, ts.Counts["invalid"], "%v", ts.Counts)
	require.Equal(t, 1, ts.Counts["ok"], "acme only: the gone tenants are not counted")
	require.Equal(t, 1, ts.Counts["unconnected"], "initech only")
	require.Equal(t, 1, ts.Counts["refused"], "globex only")
	require.Equal(t, 1, ts.Counts["paused"], "umbrella, paused with no rows, is counted")
	states := map[string]status.Tenant{}
	for _, tn := range ts.Top {
		states[tn.Tenant] = tn
	}
	require.Equal(t, "error", states["hooli"].State)
	require.Contains(t, states["hooli"].Error, "22012 division_by_zero")
	require.Equal(t, "invalid", states[".."].State)
	require.Contains(t, states[".."].Error, "a path segment of its own")

	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "1 ok, 1 unconnected, 1 refused, 1 paused, 0 limited, 1 error, 1 invalid")
	require.Regexp(t, `tenant hooli +ERROR: 1 pending, 0 failed, oldest pending [^:]+: .*SQLSTATE 22012 division_by_zero`, r.stdout)
	require.NotContains(t, r.stdout, "gone-")
}
