package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/syncer-dev/syncer/internal/database"
)

// Background verification of a source whose destination has a tenants
// block (docs/protocol.md sections 10 and 11): each tenant's rows live in
// the tenant's own account, so the source's run verifies its tenants one
// after another, each with a reader of its account. Each tenant's cursor
// and last run are kept under TenantRunKey (an interrupted run resumes
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
	// ("" starts at the first).
	Page(ctx context.Context, q database.Querier, after string, n int) ([]string, error)
	// Tenant returns the source of tenant's rows and a reader of its
	// account; ErrNoTenantReader, wrapped, when the tenant has no account
	// to read (it is skipped, and logged).
	Tenant(ctx context.Context, tenant string) (Source, Reader, error)
}

// ErrNoTenantReader is returned, wrapped, by Tenants.Tenant for a tenant
// with rows but no account to read them from.
var ErrNoTenantReader = errors.New("tenant has no account to read")

// runTenants is Run for j.Tenants: each tenant in turn, their counts
// summed into the source's last run.
func (b *Background) runTenants(ctx context.Context, j *Job, c *Config) (res *Result, err error) {
	name := j.Source.Name()
	if err := started(ctx, b.db, name, c.By); err != nil {
		return nil, err
	}
	res = &Result{Source: name, Examples: []Example{}}
	defer func() { recordEnd(ctx, b.db, name, res, &err) }()
	after := ""
	for {
		ts, err := j.Tenants.Page(ctx, b.db, after, TenantsPageSize)
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			return res, fmt.Errorf("verify: tenants of %s: %w", name, err)
		}
		for _, t := range ts {
			src, rd, err := j.Tenants.Tenant(ctx, t)
			if errors.Is(err, ErrNoTenantReader) {
				b.cfg.Logger.WarnContext(ctx, "verify: background: tenant not verified", slog.String("source", name),
					slog.String("tenant", t), slog.String("error", err.Error()))
				continue
			}
			if err != nil {
				return res, fmt.Errorf("verify: source %s: tenant %s: %w", name, t, err)
			}
			r, err := Run(ctx, b.db, src, rd, c)
			sum(res, r)
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

// sum adds r's counts and examples to into.
func sum(into, r *Result) {
	if r == nil {
		return
	}
	into.Checked += r.Checked
	into.OK += r.OK
	into.Missing += r.Missing
	into.Stale += r.Stale
	into.Zombie += r.Zombie
	into.Unknown += r.Unknown
	into.Pending += r.Pending
	into.Healed += r.Healed
	into.Resumed = into.Resumed || r.Resumed
	for _, ex := range r.Examples {
		into.example(ex)
	}
}
