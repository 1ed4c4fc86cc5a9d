package operator

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// ErrNoTenant is returned for an empty tenant: one tenant is named, never
// all of them.
var ErrNoTenant = errors.New("operator: a tenant's value is required")

// tenantStore returns the shared facts of tenant at destination dest (an
// installed source's; ErrUnknown otherwise).
func tenantStore(ctx context.Context, pool *pgxpool.Pool, dest, tenant string) (*breakerstore.Store, error) {
	if tenant == "" {
		return nil, ErrNoTenant
	}
	if _, err := store(ctx, pool, dest); err != nil {
		return nil, err
	}
	return breakerstore.New(pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace(dest, tenant)})
}

// PauseTenant stops every daemon sending tenant's rows to dest, until
// ResumeTenant; its pending rows are kept, and every other tenant's go on.
// It is a hold in the tenant's namespace (breakerstore.TenantNamespace),
// which the tenant's deliverer takes as a destination takes its own,
// within its second's read of the shared facts: unlike Pause it does not
// wait for the daemons (they report holds per destination only).
func PauseTenant(ctx context.Context, pool *pgxpool.Pool, dest, tenant, by string) error {
	return setTenantHold(ctx, pool, dest, tenant, breakerstore.Hold{Paused: true, By: by})
}

// ResumeTenant ends PauseTenant.
func ResumeTenant(ctx context.Context, pool *pgxpool.Pool, dest, tenant, by string) error {
	return setTenantHold(ctx, pool, dest, tenant, breakerstore.Hold{Paused: false, By: by})
}

func setTenantHold(ctx context.Context, pool *pgxpool.Pool, dest, tenant string, h breakerstore.Hold) error {
	st, err := tenantStore(ctx, pool, dest, tenant)
	if err != nil {
		return err
	}
	_, err = st.SetHold(ctx, h)
	return err
}

// ProbeTenant asks the daemons to probe tenant now if a refusal of its
// credentials or URL holds it; held says whether one did (when none does,
// nothing is asked). The probe's answer is WaitTenantProbeAnswer's.
func ProbeTenant(ctx context.Context, pool *pgxpool.Pool, dest, tenant, by string) (p breakerstore.Probe, held bool, err error) {
	st, err := tenantStore(ctx, pool, dest, tenant)
	if err != nil {
		return p, false, err
	}
	return askProbe(ctx, st, by)
}

// WaitTenantProbeAnswer waits for the answer to ProbeTenant's probe p,
// until ctx ends.
func WaitTenantProbeAnswer(ctx context.Context, pool *pgxpool.Pool, dest, tenant string, p breakerstore.Probe) (breakerstore.ProbeAnswer, error) {
	return waitProbeAnswer(ctx, pool, breakerstore.TenantNamespace(dest, tenant), p)
}
