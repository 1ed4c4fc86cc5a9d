package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Issue 43: a destination's tenants block, as the file writes it, gives
// each tenant its own account, its own token and the custom format bound
// to it; an unconnected tenant is an error that makes its rows wait.
func TestFileDestinationTenants(t *testing.T) {
	t.Parallel()
	fake := fakethirdparty.New(fakethirdparty.Config{Format: fakethirdparty.FormatCustom, Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	ts := dbtest.NewMigrated(t)
	ctx := t.Context()
	_, err := ts.Pool.Exec(ctx, `CREATE TABLE crm_connections (account_id text PRIMARY KEY, token text, portal_id int);
		INSERT INTO crm_connections VALUES ('acme', 'tok-secret-acme', 7)`)
	require.NoError(t, err)
	file, err := config.Parse(fmt.Appendf(nil, `
destinations:
  crm:
    url: %s/t/{tenant}
    format: custom
    tenants:
      query: SELECT token, portal_id FROM crm_connections WHERE account_id = $1
    request:
      path: /crm/v3/objects/contacts/batch/upsert
      body: '{inputs: [.items[] | {id, version, properties: (.payload + {portal: $tenant.portal_id})}]}'
sources:
  - {table: contacts, key: id, tenant: account_id, destination: crm}
`, srv.URL), func(string) string { return "" })
	require.NoError(t, err)
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	forTenant, closeAll, err := daemon.TenantsOf(ts.Pool, file, "crm", "inst-test", logger)
	require.NoError(t, err)
	t.Cleanup(closeAll)

	dest, err := forTenant(ctx, "acme")
	require.NoError(t, err)
	_, err = dest.Deliver(ctx, delivery.Batch{Source: "contacts", Time: time.Unix(1700000000, 0),
		Items: []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{"email":"a@example.com"}`)}}})
	require.NoError(t, err)
	require.Equal(t, int64(1), fake.TenantStats().Tenants["acme"].ItemsAccepted)

	dest, err = forTenant(ctx, "globex")
	require.ErrorIs(t, err, tenants.ErrUnconnected)
	require.Nil(t, dest, "no typed nil in the interface")
	require.NotContains(t, logs.String(), "tok-secret")
}
