package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// TenantRegistry is dest's tenants as a daemon builds them, for a reader
// of one tenant's account (`syncer verify --tenant`, through
// Registry.Client): tcfg is the destination's client settings
// (ThirdPartyConfig). No deliverer is built; close it when done.
func TenantRegistry(pool *pgxpool.Pool, creds *credentials.Set, logger *slog.Logger, dest *config.Destination, tcfg *thirdparty.Config) (*tenants.Registry, error) {
	d := &Daemon{pool: pool, creds: creds, logger: logger}
	return d.tenantRegistry(dest, tcfg, &delivery.Config{}, "", false)
}

// tenantVerify is a background verify of a tenant source whose
// destination has a tenants block: each tenant read from its own account,
// through the destination's tenants registry.
type tenantVerify struct {
	src    *sources.Source
	reg    *tenants.Registry
	format string
	block  *custom.VerifyConfig
}

// Page reads the tenants of the source's rows through the sources package.
func (t tenantVerify) Page(ctx context.Context, q database.Querier, after string, n int) ([]string, error) {
	return sources.TableTenants(ctx, q, t.src, after, n)
}

// Tenant is tenant's rows and a reader of its account.
func (t tenantVerify) Tenant(ctx context.Context, tenant string) (verify.Source, verify.Reader, error) {
	client, columns, err := t.reg.Account(ctx, tenant)
	if errors.Is(err, tenants.ErrUnconnected) {
		return nil, nil, fmt.Errorf("%w: %w", verify.ErrNoTenantReader, err)
	}
	if err != nil {
		return nil, nil, err
	}
	src, err := verify.NewConfiguredTenant(t.src, tenant, verify.Range{})
	if err != nil {
		return nil, nil, err
	}
	rd, err := verify.NewReader(t.format, t.block, client, t.src.Name)
	if err != nil {
		return nil, nil, err
	}
	if cr, ok := rd.(*verify.CustomReader); ok {
		// The block's programs see the tenant as its deliverer's do.
		cr.Verify = cr.Verify.ForTenant(tenant, columns)
	}
	return src, rd, nil
}
