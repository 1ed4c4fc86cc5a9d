package tenants_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/tenants"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE crm_connections (account_id bigint PRIMARY KEY, api_base text, refresh_token text, portal_id int, revoked_at timestamptz)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO crm_connections VALUES (1, 'http://x', 'rt-secret', 7, NULL)`)
	require.NoError(t, err)
	good := &tenants.Settings{
		Query:     "SELECT api_base AS url, refresh_token, portal_id FROM crm_connections WHERE account_id = $1 AND revoked_at IS NULL;",
		OnRefresh: "UPDATE crm_connections SET refresh_token = $2 WHERE account_id = $1",
	}
	custom := tenants.CheckSpec{HasTokenURL: true, Programs: true}
	require.NoError(t, tenants.Check(ctx, pool, good, custom))
	var rt string
	require.NoError(t, pool.QueryRow(ctx, `SELECT refresh_token FROM crm_connections`).Scan(&rt))
	require.Equal(t, "rt-secret", rt, "check changes nothing")

	for _, tt := range []struct {
		name      string
		query, on string
		spec      tenants.CheckSpec
		want      string
	}{
		{"query does not compile", "SELECT api_base AS url FROM crm_connectionz WHERE account_id = $1", "", custom,
			`tenants.query: relation "crm_connectionz" does not exist (at character 29)`},
		{"on_refresh does not compile", good.Query, "UPDATE crm_connections SET refresh_tokn = $2 WHERE account_id = $1", custom,
			`tenants.on_refresh: column "refresh_tokn" of relation "crm_connections" does not exist`},
		{"column without a name", "SELECT api_base AS url, portal_id + 1 FROM crm_connections WHERE account_id = $1", "", custom,
			"tenants.query: returns a column without a name"},
		{"id is the tenant's", "SELECT api_base AS url, portal_id AS id FROM crm_connections WHERE account_id = $1", "", custom,
			`tenants.query: returns column "id", which is $tenant.id`},
		{"refresh token without token_url", good.Query, "", tenants.CheckSpec{Programs: true},
			`tenants.query: returns column "refresh_token", which needs auth.token_url`},
		{"other column without programs", good.Query, "", tenants.CheckSpec{HasTokenURL: true},
			`tenants.query: returns unknown column "portal_id"`},
		{"no url anywhere", "SELECT refresh_token FROM crm_connections WHERE account_id = $1", "", custom,
			"tenants.query: must return column url"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tenants.Check(ctx, pool, &tenants.Settings{Query: tt.query, OnRefresh: tt.on}, tt.spec)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "rt-secret")
		})
	}
}
