package daemon

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// accounts builds what a file's destination is reached with: its client
// settings (its credentials and TLS: destinationCredentials) and its
// tenants' registry (tenantRegistry). The daemon builds its destinations
// with it, and `syncer verify` reads them back with it (VerifyAccounts),
// so that a destination is read with exactly the credentials the export
// writes with.
type accounts struct {
	// pool holds the destinations' shared facts and the tenants' rows.
	pool *pgxpool.Pool
	// creds reads every secret and certificate file.
	creds  *credentials.Set
	logger *slog.Logger
	// queries bounds the tenants queries of every registry together; nil
	// (a command's): each registry has one of its own.
	queries *tenants.QueryGate
}

// accounts returns the daemon's.
func (d *Daemon) accounts() *accounts {
	return &accounts{pool: d.pool, creds: d.creds, logger: d.logger, queries: d.queries}
}
