package daemon

import (
	"context"
	"log/slog"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// tenantDestinations gives each tenant of a source with a tenant column
// its own destination (exporter.TenantDestinations, docs/protocol.md
// section 10): its destination's tenants.Registry, asked per batch.
type tenantDestinations struct{ r *tenants.Registry }

// The exporter's interface, declared here as its method so that this
// file compiles before internal/exporter declares it.
var _ interface {
	For(ctx context.Context, tenant string) (exporter.Destination, error)
} = tenantDestinations{}

// For returns tenant's deliverer; an error (unconnected, an unusable row)
// makes the tenant's rows wait.
func (t tenantDestinations) For(ctx context.Context, tenant string) (exporter.Destination, error) {
	d, err := t.r.For(ctx, tenant)
	if err != nil {
		return nil, err // never a nil *Deliverer in a non-nil interface
	}
	return d, nil
}

// tenantRegistry builds dest's tenants: with its tenants block, each
// tenant's URL and credentials from the query; without, every tenant to
// the destination's URL with its credentials, each with its own state.
// tcfg and dcfg are the destination's client and deliverer settings as
// newDestination made them. Nothing is read before a tenant is asked for.
// reader is a command's registry (tenants.Config.Reader), not the
// daemon's.
func (d *Daemon) tenantRegistry(dest *config.Destination, tcfg *thirdparty.Config, dcfg *delivery.Config, installation string, reader bool) (*tenants.Registry, error) {
	cfg := tenants.Config{
		Destination: dest.Name,
		Settings:    dest.Tenants,
		Pool:        d.pool,
		ThirdParty:  *tcfg,
		Delivery:    *dcfg,
		Wrap:        func(c delivery.Client) delivery.Client { return guarded{c} },
		Queries:     d.queries, // nil (verify's own registry): one of its own
		Logger:      d.logger.With(slog.String("destination", dest.Name)),
		Reader:      reader,
	}
	cfg.Delivery.Logger, cfg.Delivery.Installation = cfg.Logger, installation
	if a := dest.Auth; a != nil && a.Type == config.AuthTenants {
		cfg.TokenURL, cfg.Scopes, cfg.Params = a.TokenURL, a.Scopes, a.Params
		var err error
		for _, s := range []struct {
			field string
			ref   config.SecretRef
			to    **credentials.Secret
		}{{"auth.client_id", a.ClientID, &cfg.ClientID}, {"auth.client_secret", a.ClientSecret, &cfg.ClientSecret}} {
			if !s.ref.Given() {
				continue
			}
			if *s.to, err = d.secret(dest.Name, s.field, s.ref); err != nil {
				return nil, err
			}
		}
	}
	return tenants.New(cfg)
}
