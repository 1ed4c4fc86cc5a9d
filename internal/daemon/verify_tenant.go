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
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// tenantReader is the reader of tenant t's account at dest, from reg (dest's
// tenants): its connection row's URL and credentials when dest has a
// tenants block, the destination's with {tenant} in its URL when not. A
// verify block's programs see the tenant as its deliverer's do. A tenant
// without a connection row is an error wrapping verify.ErrNoTenantReader
// and tenants.ErrUnconnected. It is the one builder of a tenant's reader:
// the daemons' background runs (tenantVerify) and `syncer verify`
// (VerifyAccounts) both ask it.
func tenantReader(ctx context.Context, reg *tenants.Registry, dest *config.Destination, source string, t tenant.Tenant) (verify.Reader, error) {
	client, columns, err := reg.Account(ctx, t.String())
	if err != nil {
		if errors.Is(err, tenants.ErrUnconnected) {
			return nil, fmt.Errorf("%w: %w", verify.ErrNoTenantReader, err)
		}
		return nil, err
	}
	return formats.Reader(dest.Format.Name, dest.Verify,
		&formats.Account{Client: client, Source: source, Tenant: t.String(), Columns: columns})
}

// tenantVerify is a background verify of a tenant source whose
// destination has a tenants block: each tenant read from its own account,
// through the destination's tenants registry.
type tenantVerify struct {
	src  *sources.Source
	reg  *tenants.Registry
	dest *config.Destination
}

var _ verify.TenantPager = tenantVerify{}

// Page reads the tenants of the source's rows through the sources package.
func (t tenantVerify) Page(ctx context.Context, q database.Querier, after tenant.Tenant, n int) ([]tenant.Tenant, error) {
	return sources.TableTenants(ctx, q, t.src, after, n)
}

// Pages is the pages of size keys the tenants' rows make, each tenant's
// apart, as the sources package counts them (verify.TenantPager).
func (t tenantVerify) Pages(ctx context.Context, q database.Querier, size int) (int64, error) {
	return sources.TableTenantPages(ctx, q, t.src, size)
}

// Tenant is tenant tn's rows and a reader of its account.
func (t tenantVerify) Tenant(ctx context.Context, tn tenant.Tenant) (verify.Source, verify.Reader, error) {
	rd, err := tenantReader(ctx, t.reg, t.dest, t.src.Name, tn)
	if err != nil {
		return nil, nil, err
	}
	src, err := verify.NewConfiguredTenant(t.src, tn, verify.Range{})
	if err != nil {
		return nil, nil, err
	}
	return src, rd, nil
}

// VerifyAccounts are the accounts `syncer verify` reads a file's
// destination with, built as the daemons build them: its token or auth
// mapping (bearer, basic, OAuth2 client credentials), its headers and its
// TLS; a tenant's from its connection row. Close it when done.
type VerifyAccounts struct {
	acc  *accounts
	dest *config.Destination
	// tcfg is the destination's client settings, with verify's timeout.
	tcfg *thirdparty.Config
	// reg is dest's tenants, built at the first tenant asked for.
	reg *tenants.Registry
}

// NewVerifyAccounts returns dest's accounts. Secrets are read through
// creds; pool holds the destination's shared facts (a TLS destination's
// certificates) and its tenants' rows.
func NewVerifyAccounts(pool *pgxpool.Pool, creds *credentials.Set, logger *slog.Logger, dest *config.Destination) (*VerifyAccounts, error) {
	acc := &accounts{pool: pool, creds: creds, logger: logger}
	tcfg := &thirdparty.Config{URL: dest.URL, Token: string(dest.Token), Headers: dest.Format.Header()}
	if _, _, err := acc.destinationCredentials(dest, fileNames(dest.Name), tcfg); err != nil {
		return nil, fmt.Errorf("destination %s: %w", dest.Name, err)
	}
	tcfg.Timeout = verify.LookupTimeoutDefault
	return &VerifyAccounts{acc: acc, dest: dest, tcfg: tcfg}, nil
}

// Reader returns the reader of the destination's own account, for
// source. A format without a read API and no verify block is an error
// wrapping formats.ErrNoReadAPI.
func (v *VerifyAccounts) Reader(source string) (verify.Reader, error) {
	client, err := thirdparty.New(v.tcfg)
	if err != nil {
		return nil, fmt.Errorf("destination %s: %w", v.dest.Name, err)
	}
	return formats.Reader(v.dest.Format.Name, v.dest.Verify, &formats.Account{Client: client, Source: source})
}

// TenantReader returns the reader of tenant t's account, for source
// (tenantReader). Its registry is a reader's (tenants.Config.Reader):
// without on_refresh it spends no refresh token, which the exporting
// daemon may hold rotated.
func (v *VerifyAccounts) TenantReader(ctx context.Context, source string, t tenant.Tenant) (verify.Reader, error) {
	if v.reg == nil {
		reg, err := v.acc.tenantRegistry(v.dest, v.tcfg, &delivery.Config{}, "", true)
		if err != nil {
			return nil, fmt.Errorf("destination %s: %w", v.dest.Name, err)
		}
		v.reg = reg
	}
	return tenantReader(ctx, v.reg, v.dest, source, t)
}

// Close closes the tenants' registry, if one was built.
func (v *VerifyAccounts) Close() {
	if v.reg != nil {
		v.reg.Close()
	}
}
