package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// ErrNoTenant is returned for an empty tenant: one tenant is named, never
// all of them.
var ErrNoTenant = errors.New("operator: a tenant's value is required")

// TenantCheck says how an action on a named tenant makes sure the tenant
// is real (docs/protocol.md section 10.1, "Commands name real tenants"):
// a tenant with no row in the sources, no connection row and nothing
// syncer keeps of it is refused with an *UnknownTenantError, so that a
// typo neither acts on nothing nor leaves a phantom tenant behind.
type TenantCheck struct {
	// Connected holds, by destination, whether its tenants query gives a
	// tenant a row: the caller has the configuration that holds the
	// queries. Defaults to nil: no query is run.
	Connected map[string]func(ctx context.Context, tenant string) (bool, error)
	// Force skips the check: a pause ahead of a tenant's first row.
	Force bool
}

// UnknownTenantError names a tenant that has nothing anywhere: no row of
// a source (Sources, those looked in), no connection row (when the query
// was run: Queried) and no fact of syncer's. It wraps ErrUnknown.
type UnknownTenantError struct {
	Destination, Tenant string
	Sources             []string
	Queried             bool
}

func (e *UnknownTenantError) Error() string {
	where := "no source with a tenant column goes to it"
	if len(e.Sources) > 0 {
		where = "no row of source " + strings.Join(e.Sources, ", ") + " has it"
	}
	query := ""
	if e.Queried {
		query = ", its tenants query gives it no connection row"
	}
	return fmt.Sprintf("destination %s has no tenant %q: %s%s, and syncer keeps nothing of it", e.Destination, e.Tenant, where, query)
}

// Unwrap makes it an ErrUnknown.
func (e *UnknownTenantError) Unwrap() error { return ErrUnknown }

// checkTenant returns an *UnknownTenantError unless tenant has a row in
// one of srcs (the sources with a tenant column of dest that the action
// is about), facts of its own at dest, or a connection row.
func checkTenant(ctx context.Context, pool *pgxpool.Pool, dest string, srcs []*sources.Source, t tenant.Tenant, check TenantCheck) error {
	if check.Force {
		return nil
	}
	e := &UnknownTenantError{Destination: dest, Tenant: t.String()}
	// The cheap reads first: syncer's own facts, the change log's and
	// failures' indexes; the application's table and the query last.
	known, err := breakerstore.TenantKnown(ctx, pool, dest, t)
	if err != nil || known {
		return err
	}
	for _, src := range srcs {
		e.Sources = append(e.Sources, src.Name)
		if found, err := sources.HasTenant(ctx, pool, src, t); err != nil || found {
			return err
		}
	}
	if connected := check.Connected[dest]; connected != nil {
		found, err := connected(ctx, t.String())
		if err != nil || found {
			return err
		}
		e.Queried = true
	}
	return e
}

// tenantSources returns the installed sources with a tenant column that
// go to dest.
func tenantSources(ctx context.Context, pool *pgxpool.Pool, dest string) ([]*sources.Source, error) {
	all, err := sources.Load(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []*sources.Source
	for _, s := range all {
		if s.Tenant != "" && s.Destination == dest {
			out = append(out, s)
		}
	}
	return out, nil
}

// tenantStore returns the shared facts of tenant at destination dest (an
// installed source's; ErrUnknown otherwise), once check finds the tenant.
func tenantStore(ctx context.Context, pool *pgxpool.Pool, dest string, t tenant.Tenant, check TenantCheck) (*breakerstore.Store, error) {
	if t.IsZero() {
		return nil, ErrNoTenant
	}
	if _, err := store(ctx, pool, dest); err != nil {
		return nil, err
	}
	srcs, err := tenantSources(ctx, pool, dest)
	if err != nil {
		return nil, err
	}
	if err := checkTenant(ctx, pool, dest, srcs, t, check); err != nil {
		return nil, err
	}
	return breakerstore.New(pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace(dest, t)})
}

// CheckSourceTenant returns an *UnknownTenantError unless tenant has a
// row in src, facts of its own at src's destination or (with
// check.Connected) a connection row there: what replay and retry-failed
// with --tenant ask first. A source that is not installed or has no
// tenant column is a *NoSourceError.
func CheckSourceTenant(ctx context.Context, pool *pgxpool.Pool, source string, t tenant.Tenant, check TenantCheck) error {
	if t.IsZero() {
		return ErrNoTenant
	}
	all, err := sources.Load(ctx, pool)
	if err != nil {
		return err
	}
	for _, s := range all {
		if s.Name == source && s.Tenant != "" {
			return checkTenant(ctx, pool, s.Destination, []*sources.Source{s}, t, check)
		}
	}
	return &NoSourceError{Name: source}
}

// PauseTenant stops every daemon sending tenant's rows to dest, until
// ResumeTenant; its pending rows are kept, and every other tenant's go on.
// It is a hold in the tenant's namespace (breakerstore.TenantNamespace),
// which the tenant's deliverer takes as a destination takes its own,
// within its second's read of the shared facts: unlike Pause it does not
// wait for the daemons (they report holds per destination only).
//
// A tenant check finds no trace of is refused (TenantCheck); check.Force
// pauses it ahead of its first row.
func PauseTenant(ctx context.Context, pool *pgxpool.Pool, dest string, t tenant.Tenant, by string, check TenantCheck) error {
	return setTenantHold(ctx, pool, dest, t, breakerstore.Hold{Paused: true, By: by}, check)
}

// ResumeTenant ends PauseTenant.
func ResumeTenant(ctx context.Context, pool *pgxpool.Pool, dest string, t tenant.Tenant, by string, check TenantCheck) error {
	return setTenantHold(ctx, pool, dest, t, breakerstore.Hold{Paused: false, By: by}, check)
}

func setTenantHold(ctx context.Context, pool *pgxpool.Pool, dest string, t tenant.Tenant, h breakerstore.Hold, check TenantCheck) error {
	st, err := tenantStore(ctx, pool, dest, t, check)
	if err != nil {
		return err
	}
	_, err = st.SetHold(ctx, h)
	return err
}

// ProbeTenant asks the daemons to probe tenant now if a refusal of its
// credentials or URL holds it; held says whether one did (when none does,
// nothing is asked). The probe's answer is WaitTenantProbeAnswer's.
func ProbeTenant(ctx context.Context, pool *pgxpool.Pool, dest string, t tenant.Tenant, by string, check TenantCheck) (p breakerstore.Probe, held bool, err error) {
	st, err := tenantStore(ctx, pool, dest, t, check)
	if err != nil {
		return p, false, err
	}
	return askProbe(ctx, st, by)
}

// WaitTenantProbeAnswer waits for the answer to ProbeTenant's probe p,
// until ctx ends.
func WaitTenantProbeAnswer(ctx context.Context, pool *pgxpool.Pool, dest string, t tenant.Tenant, p breakerstore.Probe) (breakerstore.ProbeAnswer, error) {
	return waitProbeAnswer(ctx, pool, breakerstore.TenantNamespace(dest, t), p)
}
