package daemon

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Tenants come and go (docs/protocol.md section 10.1; docs/design.md,
// "Tenants that come and go"): a tenant whose rows and connection were
// deleted leaves its facts in syncer_state (a learnt rate, a breaker, a
// missing connection row). Every daemon deletes them now and then; the
// deletes are idempotent, and a fact written meanwhile is never deleted.
const (
	// TenantTidyEveryDefault is Config.TenantTidyEvery's default.
	TenantTidyEveryDefault = 10 * time.Minute
	// TenantForgetAfterDefault is Config.TenantForgetAfter's default:
	// with TenantTidyEveryDefault, a gone tenant's facts are deleted
	// within 40 minutes of the last one written, within the hour the
	// contract allows.
	TenantForgetAfterDefault = 30 * time.Minute
)

// tidyTenants runs tidyOnce every TenantTidyEvery (the first a random
// part of it after the start, so that daemons started together do not
// tidy together) until ctx ends.
func (d *Daemon) tidyTenants(ctx context.Context) {
	every := d.cfg.TenantTidyEvery
	wait := time.Duration(rand.Int64N(int64(every))) + 1
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = every
		n, err := d.tidyOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			d.logger.WarnContext(ctx, "daemon: tidy of gone tenants' facts failed; tried again later", slog.String("error", err.Error()))
		case n > 0:
			d.logger.InfoContext(ctx, "daemon: deleted the facts of gone tenants (nothing pending, failed or paused, no fact written for a while)",
				slog.Int("tenants", n), slog.Duration("after", d.cfg.TenantForgetAfter))
		}
	}
}

// tidyOnce deletes the facts of the gone tenants of every destination
// that a source with a tenant column sends to: those with no rows pending
// or failed in any such source, no person's pause, and no fact written
// within TenantForgetAfter. It returns how many tenants it deleted.
func (d *Daemon) tidyOnce(ctx context.Context) (int, error) {
	before := time.Now().Add(-d.cfg.TenantForgetAfter)
	withTenant, err := sources.TenantSources(ctx, d.pool)
	if err != nil || len(withTenant) == 0 {
		return 0, err
	}
	stats, err := sources.Stats(ctx, d.pool)
	if err != nil {
		return 0, err
	}
	busy := map[string]map[string]bool{} // destination -> tenants with rows
	for _, st := range stats {
		if _, ok := withTenant[st.Name]; !ok {
			continue
		}
		backlog, err := sources.TenantsBacklog(ctx, d.pool, st.Name, 0, "", nil)
		if err != nil {
			return 0, err
		}
		if busy[st.Destination] == nil {
			busy[st.Destination] = map[string]bool{}
		}
		for tenant := range backlog.Rows {
			busy[st.Destination][tenant] = true
		}
	}
	total := 0
	for dest, rows := range busy {
		n, err := breakerstore.TidyTenants(ctx, d.pool, dest, before, func(tenant string) bool { return rows[tenant] })
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
