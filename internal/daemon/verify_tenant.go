package daemon

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// TenantRegistry is dest's tenants as a daemon builds them, for a reader
// of one tenant's account (`syncer verify --tenant`, through
// Registry.Client): tcfg is the destination's client settings
// (ThirdPartyConfig). No deliverer is built; close it when done.
func TenantRegistry(pool *pgxpool.Pool, creds *credentials.Set, logger *slog.Logger, dest *config.Destination, tcfg *thirdparty.Config) (*tenants.Registry, error) {
	d := &Daemon{pool: pool, creds: creds, logger: logger}
	return d.tenantRegistry(dest, tcfg, &delivery.Config{}, "")
}
