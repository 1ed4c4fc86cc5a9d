package daemon

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/exporter"
)

// TenantsOf builds the file's destination name as a daemon does, and
// returns its tenants as the exporter asks for them.
func TenantsOf(pool *pgxpool.Pool, file *config.Config, name, installation string, logger *slog.Logger) (func(context.Context, string) (exporter.Destination, error), func(), error) {
	d := &Daemon{pool: pool, logger: logger, creds: credentials.NewSet(logger)}
	built, err := d.fileDestination(file.Destination(name), installation)
	if err != nil {
		return nil, nil, err
	}
	return exporter.TenantsOf(built.tenants).For, func() { built.client.Close(); built.tenants.Close() }, nil
}
