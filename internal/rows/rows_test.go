package rows_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/rows/rowstest"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// The shared suite against each kind: resources, a configured source,
// and one tenant of a configured source with a tenant column.

func TestResources(t *testing.T) {
	t.Parallel()
	rowstest.Run(t, func(t *testing.T) rowstest.Fixture {
		db := dbtest.NewMigrated(t)
		r, err := rows.Open(context.Background(), db.Pool, rows.Scope{Source: rows.ResourcesName})
		require.NoError(t, err)
		return rowstest.Fixture{Pool: db.Pool, Rows: r, BadKey: "forty", Write: func(t *testing.T, n int) []string {
			var ids []int64
			err := db.Pool.QueryRow(context.Background(), `WITH i AS (INSERT INTO resources (payload)
				SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g RETURNING id) SELECT array_agg(id ORDER BY id) FROM i`, n).Scan(&ids)
			require.NoError(t, err)
			var out []string
			for _, id := range ids {
				out = append(out, strconv.FormatInt(id, 10))
			}
			return out
		}}
	})
}

// configured installs a source of table contacts (with a tenant column
// account) and returns the rows of tenant's scope, written for tenant
// ("" writes for a tenant of its own and reads every row).
func configured(t *testing.T, tenant tenant.Tenant) rowstest.Fixture {
	ctx := context.Background()
	db := dbtest.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, name text)`)
	require.NoError(t, err)
	cfg, err := config.Parse([]byte(`destinations:
  crm:
    url: http://127.0.0.1:1
sources:
  - table: contacts
    key: id
    tenant: account
    lanes: 4
    columns: [name]
    destination: crm
    snapshot: false
`), nil)
	require.NoError(t, err)
	_, err = sources.Install(ctx, db.Pool, cfg.SourceSpecs())
	require.NoError(t, err)
	r, err := rows.Open(ctx, db.Pool, rows.Scope{Source: "contacts", Tenant: tenant})
	require.NoError(t, err)
	account := tenant.String()
	if account == "" {
		account = "acme"
	}
	next := int64(100)
	// Of a tenant's scope, another tenant's row beside each of the
	// scope's, which the scope never reads.
	other := `, ($1 + 1000, 'other', 'y')`
	if tenant == "" {
		other = ""
	}
	return rowstest.Fixture{Pool: db.Pool, Rows: r, BadKey: "forty", Write: func(t *testing.T, n int) []string {
		var out []string
		for range n {
			next++
			_, err := db.Pool.Exec(ctx, `INSERT INTO contacts VALUES ($1, $2, 'x')`+other, next, account)
			require.NoError(t, err)
			out = append(out, strconv.FormatInt(next, 10))
		}
		return out
	}}
}

func TestConfigured(t *testing.T) {
	t.Parallel()
	rowstest.Run(t, func(t *testing.T) rowstest.Fixture { return configured(t, "") })
}

func TestConfiguredTenant(t *testing.T) {
	t.Parallel()
	rowstest.Run(t, func(t *testing.T) rowstest.Fixture { return configured(t, "acme") })
}

// The kind is decided once, by the name: a tenant of a source without
// tenants is refused, not read as every row.
func TestOpenRefusesATenantOfASourceWithoutTenants(t *testing.T) {
	t.Parallel()
	db := dbtest.NewMigrated(t)
	_, err := rows.Open(context.Background(), db.Pool, rows.Scope{Source: rows.ResourcesName, Tenant: "acme"})
	var nte *rows.NoTenantsError
	require.True(t, errors.As(err, &nte), "%v", err)
	require.ErrorIs(t, err, rows.ErrUnknown)
	require.Equal(t, rows.Resources, rows.KindOf(rows.ResourcesName))
	require.Equal(t, rows.Configured, rows.KindOf("contacts"))
}
