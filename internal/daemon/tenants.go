package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// tenantRegistry builds dest's tenants: with its tenants block, each
// tenant's URL and credentials from the query; without, every tenant to
// the destination's URL with its credentials, each with its own state.
// tcfg and dcfg are the destination's client and deliverer settings as
// newDestination made them. Nothing is read before a tenant is asked for.
// reader is a command's registry (tenants.Config.Reader), not the
// daemon's: it only reads. The daemon's replays a tenant's live rows when
// its account changes (unless tenants.replay_on_change is false).
func (a *accounts) tenantRegistry(dest *config.Destination, tcfg *thirdparty.Config, dcfg *delivery.Config, installation string, reader bool) (*tenants.Registry, error) {
	cfg := tenants.Config{
		Destination: dest.Name,
		Settings:    dest.Tenants,
		Pool:        a.pool,
		ThirdParty:  *tcfg,
		Delivery:    *dcfg,
		Wrap:        func(c delivery.Client) delivery.Client { return guarded{c} },
		Queries:     a.queries, // nil (verify's own registry): one of its own
		Logger:      a.logger.With(slog.String("destination", dest.Name)),
		Reader:      reader,
	}
	cfg.Delivery.Logger, cfg.Delivery.Installation = cfg.Logger, installation
	if !reader && dest.Tenants != nil && !dest.Tenants.NoReplayOnChange {
		name := dest.Name
		cfg.Replay = func(ctx context.Context, tx pgx.Tx, t string) ([]int64, error) {
			return replayTenant(ctx, tx, name, tenant.Tenant(t))
		}
	}
	if auth := dest.Auth; auth != nil && auth.Type == config.AuthTenants {
		cfg.TokenURL, cfg.Scopes, cfg.Params = auth.TokenURL, auth.Scopes, auth.Params
		var err error
		for _, s := range []struct {
			field string
			ref   config.SecretRef
			to    **credentials.Secret
		}{{"auth.client_id", auth.ClientID, &cfg.ClientID}, {"auth.client_secret", auth.ClientSecret, &cfg.ClientSecret}} {
			if !s.ref.Given() {
				continue
			}
			if *s.to, err = a.secret(dest.Name, s.field, s.ref); err != nil {
				return nil, err
			}
		}
	}
	return tenants.New(cfg)
}

// replayTenant queues, in tx, a replay of tenant t's live rows of each
// source with a tenant column that sends to destination dest, through the
// replay model `syncer replay --source S --tenant T` uses (recorded with
// its tenant, the source's job woken): a tenant whose account changed
// gets everything at the new one (contract section 10.1). A source with
// no live row of the tenant gets none.
func replayTenant(ctx context.Context, tx pgx.Tx, dest string, t tenant.Tenant) ([]int64, error) {
	all, err := sources.Load(ctx, tx)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, s := range all {
		if s.Destination != dest || s.Tenant == "" {
			continue
		}
		plan, err := replays.PlanReplay(ctx, tx, sources.ReplayTable(s), replays.Request{Range: replays.SourceRange{Tenant: t}})
		if err != nil {
			return nil, fmt.Errorf("replay tenant %s of source %s: %w", t, s.Name, err)
		}
		if plan.Count == 0 {
			continue
		}
		id, err := plan.Start(ctx, tx)
		if err != nil {
			return nil, fmt.Errorf("replay tenant %s of source %s: %w", t, s.Name, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// rereadTenants reads again, every half tenants.RefreshEveryDefault, the
// rows of the tenants each registry holds that were not read within
// RefreshEvery (tenants.Registry.Reread), so an idle tenant's new account
// gets its replay within 45 s, without waiting for its next change.
func (d *Daemon) rereadTenants(ctx context.Context) {
	t := newGrid(d.started.Add(phaseTenants+tenants.RefreshEveryDefault/2), tenants.RefreshEveryDefault/2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			t.Next()
		}
		d.mu.Lock()
		var regs []*tenants.Registry
		for _, dest := range d.dests {
			if dest.tenants != nil {
				regs = append(regs, dest.tenants)
			}
		}
		d.mu.Unlock()
		for _, r := range regs {
			r.Reread(ctx)
		}
	}
}
