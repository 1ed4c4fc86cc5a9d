package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/verify"
)

// `syncer verify --source S` of a source whose destination has a tenants
// block (docs/protocol.md section 10): each tenant's rows are in the tenant's own
// account, so no one client reads them all; every tenant with rows is
// verified in turn, each read with its own account and paced by its own
// limits, each a run of its own (its cursor and last run, as --tenant
// keeps them), and the source's last run holds the sums.

// everyTenant is what verifying every tenant of the source needs: nil
// when the source is not one whose destination has a tenants block, or
// --tenant names one.
type everyTenant struct {
	dest *config.Destination
	rows rows.Rows
}

// everyTenantOf returns the every-tenant setup of rs, or nil.
func (c *VerifyCmd) everyTenantOf(rs rows.Rows) (*everyTenant, error) {
	if c.Tenant != "" || !rs.Tenanted() {
		return nil, nil
	}
	cfg, err := c.ConfigFile.Load(true)
	if err != nil || cfg == nil {
		return nil, err
	}
	dest, err := destinationOf(cfg, c.Source)
	if err != nil || dest.Tenants == nil {
		return nil, err
	}
	return &everyTenant{dest: dest, rows: rs}, nil
}

// cliTenants are the source's tenants as verify.RunTenants takes them:
// those with rows, each read with the account its connection row gives.
type cliTenants struct {
	c    *VerifyCmd
	acc  *daemon.VerifyAccounts
	dest *config.Destination
	rows rows.Rows
}

func (t *cliTenants) Page(ctx context.Context, q database.Querier, after tenant.Tenant, n int) ([]tenant.Tenant, error) {
	return t.rows.Tenants(ctx, q, after, n)
}

func (t *cliTenants) Tenant(ctx context.Context, tn tenant.Tenant) (verify.Source, verify.Reader, error) {
	// The account is read as --tenant reads it.
	rd, err := tenantReader(ctx, t.acc, t.dest, t.c.Source, tn)
	if err != nil {
		return nil, nil, err
	}
	one, err := t.rows.OfTenant(tn)
	if err != nil {
		return nil, nil, err
	}
	src, err := t.c.verifySource(one)
	if err != nil {
		return nil, nil, err
	}
	return src, rd, nil
}

// noAccount is tenantReader's error for a tenant without a connection
// row: a usage error when --tenant asks for it, a tenant skipped (and
// said so) when every tenant is verified.
type noAccount struct{ error }

func (e noAccount) Unwrap() []error { return []error{e.error, verify.ErrNoTenantReader} }

// destLimits are dest's rate limit and burst, the flags' when it sets
// none.
func (c *VerifyCmd) destLimits(dest *config.Destination) (float64, int) {
	limit, burst := c.RateLimit, c.RateBurst
	if dest.RateLimit != nil {
		limit = *dest.RateLimit
	}
	if dest.RateBurst > 0 {
		burst = dest.RateBurst
	}
	return limit, burst
}

// runEveryTenant verifies every tenant of et.src with rows, prints the
// result and returns an exitStatus of 3 when something drifted.
func (c *VerifyCmd) runEveryTenant(ctx context.Context, env *Env, pool *pgxpool.Pool, et *everyTenant) error {
	if _, err := c.verifySource(et.rows); err != nil {
		return err
	}
	name := et.rows.Scope().Source
	schema, err := database.CurrentSchema(ctx, pool)
	if err != nil {
		return err
	}
	if err := verify.CheckIdle(ctx, pool, schema, name); err != nil {
		return err
	}
	acc, err := daemon.NewVerifyAccounts(pool, credentials.NewSet(env.Logger), env.Logger, et.dest)
	if err != nil {
		return err
	}
	defer acc.Close()
	limit, burst := c.destLimits(et.dest)
	var skipped []tenant.Tenant
	var pace *verify.Pace
	defer func() { releasePace(ctx, pace, env.Logger) }()
	res, err := verify.RunTenants(ctx, pool, name, &verify.TenantsRun{
		Tenants: &cliTenants{c: c, acc: acc, dest: et.dest, rows: et.rows},
		PaceOf: func(tn tenant.Tenant) *verify.Pace {
			// Each account has its own rate limit, learned and held apart
			// from the other tenants' (section 10); the tenant before
			// gives its share back.
			releasePace(ctx, pace, env.Logger)
			pace, _ = sharedPace(pool, limit, burst, breakerstore.TenantNamespace(et.dest.Name, tn))
			return pace
		},
		Skipped: func(tn tenant.Tenant, err error) {
			skipped = append(skipped, tn)
			fmt.Fprintf(env.Stderr, "source %s tenant %s: not verified: %v\n", name, tn, err)
		},
	}, &verify.Config{
		LookupSize: c.LookupSize,
		Sample:     c.Sample,
		Heal:       c.Heal,
		Logger:     env.Logger,
	})
	return c.report(env.Stdout, res, err, c.printTenants)
}

// printTenants writes each tenant's counts, then the sums and examples as
// print does.
func (c *VerifyCmd) printTenants(w io.Writer, res *verify.Result) error {
	if !c.JSON {
		for i := range res.Tenants {
			t := &res.Tenants[i]
			printCounts(w, runName(res.Source, t.Tenant), t.Resumed, &t.KindCounts)
		}
		fmt.Fprintf(w, "source %s: %d tenants verified, each with its own account\n", res.Source, len(res.Tenants))
	}
	sums := *res
	// The resumed line is each tenant's, printed above.
	sums.Resumed = false
	return c.print(w, &sums)
}

// sharedPace is the pace of a run from the command line of the
// destination (or tenant) whose facts are in namespace ns: at the
// destination's rate limit, and at a share of it the daemons' deliverers
// leave to it (verify.Pace.Yield), so that the export and the verify
// together stay within the limit.
func sharedPace(pool *pgxpool.Pool, limit float64, burst int, ns string) (*verify.Pace, error) {
	store, err := breakerstore.New(pool, &breakerstore.Config{Namespace: ns})
	if err != nil {
		return nil, err
	}
	return verify.NewPace(limit, burst).Shared(ns).Yield(store), nil
}

// releasePace gives the run's share of the rate back to the export.
func releasePace(ctx context.Context, p *verify.Pace, logger *slog.Logger) {
	if err := p.Release(ctx); err != nil {
		logger.WarnContext(ctx, "verify: give the share of the rate back (it ends with its lease)", slog.String("error", err.Error()))
	}
}
