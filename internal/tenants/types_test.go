package tenants_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// A tenant column of another type than text (a bigint account id, a
// uuid): the tenant's value, text, is compared as the query says.
func TestTenantOfAnotherType(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE accounts (id bigint PRIMARY KEY, uid uuid, region text)`)
	b.exec(t, `INSERT INTO accounts VALUES (42, '6f1c1e9e-0b7e-4a39-9d1a-6c1b8b6f3a10', 'eu')`)
	for _, tt := range []struct{ query, tenant, other string }{
		{`SELECT region FROM accounts WHERE id = $1`, "42", "43"},
		{`SELECT region FROM accounts WHERE uid = $1`, "6f1c1e9e-0b7e-4a39-9d1a-6c1b8b6f3a10", "00000000-0000-0000-0000-000000000000"},
	} {
		r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tt.query}, ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}"}})
		_, err := r.For(t.Context(), tt.tenant)
		require.NoError(t, err, tt.query)
		_, err = r.For(t.Context(), tt.other)
		require.ErrorIs(t, err, tenants.ErrUnconnected, tt.query)
	}
}
