package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/tenants"
)

const tenantsFile = `
destinations:
  crm:
    format: custom
    tenants:
      query: |
        SELECT api_base AS url, refresh_token, portal_id
        FROM crm_connections WHERE account_id = $1 AND revoked_at IS NULL
      on_refresh: "UPDATE crm_connections SET refresh_token = $2 WHERE account_id = $1"
    auth: {token_url: "https://auth.example.com/oauth/token", client_id_env: CRM_APP_ID, client_secret_env: CRM_APP_SECRET}
    rate_limit: 10
    request:
      path: /portals/{tenant}/contacts/batch
      body: '{portal: $tenant.portal_id, inputs: [.items[] | {id, properties: .payload}]}'
sources:
  - table: contacts
    key: [account_id, email]
    tenant: account_id
    destination: crm
`

func TestParseTenants(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(tenantsFile), env(map[string]string{"CRM_APP_ID": "app", "CRM_APP_SECRET": "app-secret"}))
	require.NoError(t, err)
	crm := cfg.Destination("crm")
	require.Equal(t, "", crm.URL, "each tenant's row gives its url")
	require.Equal(t, &tenants.Settings{
		Query:     "SELECT api_base AS url, refresh_token, portal_id\nFROM crm_connections WHERE account_id = $1 AND revoked_at IS NULL\n",
		OnRefresh: "UPDATE crm_connections SET refresh_token = $2 WHERE account_id = $1",
		Timeout:   5 * time.Second, // tenants.timeout's default
	}, crm.Tenants)

	file := strings.Replace(tenantsFile, "      on_refresh:", "      timeout: 1500ms\n      on_refresh:", 1)
	cfg, err = config.Parse([]byte(file), env(map[string]string{"CRM_APP_ID": "app", "CRM_APP_SECRET": "app-secret"}))
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, cfg.Destination("crm").Tenants.Timeout)
	require.Equal(t, config.AuthTenants, crm.Auth.Type)
	require.Equal(t, "https://auth.example.com/oauth/token", crm.Auth.TokenURL)
	require.Equal(t, "CRM_APP_ID", crm.Auth.ClientID.Env)
}

func TestParseTenantsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, from, to, want string
	}{
		{"no $1", "account_id = $1 AND", "account_id = 'x' AND", "destinations.crm.tenants.query: must use $1"},
		{"no $2", "refresh_token = $2", "refresh_token = NULL", "destinations.crm.tenants.on_refresh: must store $2"},
		{"timeout not a duration", "      on_refresh:", "      timeout: 5\n      on_refresh:", "destinations.crm.tenants.timeout: must be a duration from 100ms to 1m"},
		{"timeout too long", "      on_refresh:", "      timeout: 2m\n      on_refresh:", "destinations.crm.tenants.timeout: must be a duration from 100ms to 1m"},
		{"unknown field", "      on_refresh:", "      each: 1\n      on_refresh:", `destinations.crm.tenants: unknown field "each"`},
		{"replay_on_change not a bool", "      on_refresh:", "      replay_on_change: sometimes\n      on_refresh:", "destinations.crm.tenants.replay_on_change: must be true or false"},
		{"auth without type and tenants", "    tenants:\n      query: |\n        SELECT api_base AS url, refresh_token, portal_id\n        FROM crm_connections WHERE account_id = $1 AND revoked_at IS NULL\n      on_refresh: \"UPDATE crm_connections SET refresh_token = $2 WHERE account_id = $1\"\n", "    url: https://x.example.com\n", "destinations.crm.auth.type: required"},
		{"no url without tenants", "    tenants:\n      query: |\n        SELECT api_base AS url, refresh_token, portal_id\n        FROM crm_connections WHERE account_id = $1 AND revoked_at IS NULL\n      on_refresh: \"UPDATE crm_connections SET refresh_token = $2 WHERE account_id = $1\"\n", "", "destinations.crm.url: required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := strings.Replace(tenantsFile, tt.from, tt.to, 1)
			require.NotEqual(t, tenantsFile, file)
			_, err := config.Parse([]byte(file), env(map[string]string{"CRM_APP_ID": "app", "CRM_APP_SECRET": "app-secret"}))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// tenants.replay_on_change (issue 54 point 16): true by default, false
// turns the replay of a tenant's new account off.
func TestParseTenantsReplayOnChange(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"CRM_APP_ID": "app", "CRM_APP_SECRET": "app-secret"})
	cfg, err := config.Parse([]byte(tenantsFile), vars)
	require.NoError(t, err)
	require.False(t, cfg.Destination("crm").Tenants.NoReplayOnChange, "on by default")
	off := strings.Replace(tenantsFile, "      on_refresh:", "      replay_on_change: false\n      on_refresh:", 1)
	cfg, err = config.Parse([]byte(off), vars)
	require.NoError(t, err)
	require.True(t, cfg.Destination("crm").Tenants.NoReplayOnChange)
}
