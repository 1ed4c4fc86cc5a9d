package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// Background verification of a source whose destination has a tenants
// block (docs/protocol.md sections 10 and 11): each tenant's rows live in
// the tenant's own account, so the source's run verifies its tenants one
// after another, each with a reader of its account. Each tenant's cursor
// and last run are kept under tenant.RunKey (an interrupted run resumes
// the tenant it stopped in; the tenants before it are verified again);
// the source's last run counts their sum. The tenants share the run's
// pace, so its spread over the source's rows and its share while rows are
// pending hold for the run as a whole.

// TenantsPageSize is how many tenants one read of the source's tenants
// returns.
const TenantsPageSize = 100

// Tenants is a source whose destination reads each tenant's rows from
// the tenant's own account (Job.Tenants).
type Tenants interface {
	// Page returns up to n tenants that have rows, in order after after
	// (the zero Tenant starts at the first).
	Page(ctx context.Context, q database.Querier, after tenant.Tenant, n int) ([]tenant.Tenant, error)
	// Tenant returns the source of t's rows and a reader of its account;
	// ErrNoTenantReader, wrapped, when the tenant has no account to read
	// (it is skipped, and logged).
	Tenant(ctx context.Context, t tenant.Tenant) (Source, Reader, error)
}

// TenantPager is Tenants that can tell how many pages of size keys its
// tenants' rows make, each tenant's paged apart: the sum over its tenants
// of ceil(rows/size), a lookup each. A periodic run spreads its lookups
// over them; many small tenants make far more lookups than the source's
// rows over a page, which alone made a run of 10,000 tenants of 10 rows
// at a 24h period last 25 days. Without it the run expects the rows over
// a page, and quickens once past them (spread.go).
type TenantPager interface {
	Pages(ctx context.Context, q database.Querier, size int) (int64, error)
}

// ErrNoTenantReader is returned, wrapped, by Tenants.Tenant for a tenant
// with rows but no account to read them from.
var ErrNoTenantReader = errors.New("tenant has no account to read")

// runTenants is Run for j.Tenants: each tenant in turn, their counts
// summed into the source's last run.
func (b *Background) runTenants(ctx context.Context, j *Job, c *Config) (*Result, error) {
	return RunTenants(ctx, b.db, j.Source.Name(), &TenantsRun{
		Tenants: j.Tenants,
		Skipped: func(t tenant.Tenant, err error) {
			b.cfg.Logger.WarnContext(ctx, "verify: background: tenant not verified", slog.String("source", j.Source.Name()),
				slog.String("tenant", t.String()), slog.String("error", err.Error()))
		},
	}, c)
}

// TenantsRun is what RunTenants needs besides the run's Config.
type TenantsRun struct {
	// Tenants are the source's tenants and their accounts. Required.
	Tenants Tenants
	// PaceOf, when set, is the pace of one tenant's lookups (its
	// account's limits); otherwise every tenant takes Config.Pace.
	PaceOf func(t tenant.Tenant) *Pace
	// Skipped is told of a tenant with rows and no account to read
	// (ErrNoTenantReader); nil says nothing.
	Skipped func(t tenant.Tenant, err error)
}

// RunTenants verifies source, whose destination reads each tenant's rows
// from the tenant's own account, a tenant after another (those with rows,
// in byte order), each a Run of its own (its cursor and last run under
// tenant.RunKey). The result holds their sums and, in Tenants, each
// tenant's counts; the source's last run records the sums. An error
// stops it at the tenant it happened in: the tenants before it are done,
// and the next run resumes that tenant.
func RunTenants(ctx context.Context, db database.DB, source string, tr *TenantsRun, cfg *Config) (res *Result, err error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := started(ctx, db, source, c.By); err != nil {
		return nil, err
	}
	res = &Result{Source: source, Examples: []Example{}, Tenants: []TenantCounts{}}
	defer func() { recordEnd(ctx, db, source, res, &err) }()
	var after tenant.Tenant
	for {
		ts, err := tr.Tenants.Page(ctx, db, after, TenantsPageSize)
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			return res, fmt.Errorf("verify: tenants of %s: %w", source, err)
		}
		for _, t := range ts {
			src, rd, err := tr.Tenants.Tenant(ctx, t)
			if errors.Is(err, ErrNoTenantReader) {
				if tr.Skipped != nil {
					tr.Skipped(t, err)
				}
				continue
			}
			if err != nil {
				return res, fmt.Errorf("verify: source %s: tenant %s: %w", source, t, err)
			}
			tc := c
			if tr.PaceOf != nil {
				tc.Pace = tr.PaceOf(t)
			}
			r, err := Run(ctx, db, src, rd, &tc)
			sum(res, r)
			if r != nil {
				res.Tenants = append(res.Tenants, countsOfTenant(t, r))
			}
			if err != nil {
				return res, err
			}
		}
		if len(ts) < TenantsPageSize {
			return res, nil
		}
		after = ts[len(ts)-1]
	}
}

// TenantCounts are one tenant's counts in a run of every tenant.
type TenantCounts struct {
	Tenant tenant.Tenant `json:"tenant"`
	KindCounts
	// Healed, Resumed: as Result's, for the text output.
	Healed  int64 `json:"-"`
	Resumed bool  `json:"-"`
}

func countsOfTenant(t tenant.Tenant, r *Result) TenantCounts {
	return TenantCounts{Tenant: t, KindCounts: r.KindCounts, Healed: r.Healed, Resumed: r.Resumed}
}

// sum adds r's counts and examples to into.
func sum(into, r *Result) {
	if r == nil {
		return
	}
	into.Add(r.KindCounts)
	into.Healed += r.Healed
	into.Resumed = into.Resumed || r.Resumed
	for _, ex := range r.Examples {
		if ex.Tenant == "" {
			ex.Tenant = r.Tenant
		}
		into.example(ex)
	}
}
