package daemon

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// ThirdPartyConfig returns the client settings the daemon sends a file's
// destination's requests with: its URL, token, headers, auth (bearer,
// basic, an OAuth2 client-credentials grant) and TLS, built by the same
// code as the daemon's own (destinationCredentials), so that `syncer
// verify` reads a destination with exactly the credentials the export
// writes with. Secrets are read through creds; pool holds the
// destination's shared facts (a TLS destination's certificates).
func ThirdPartyConfig(pool *pgxpool.Pool, creds *credentials.Set, logger *slog.Logger, dest *config.Destination) (*thirdparty.Config, error) {
	d := &Daemon{pool: pool, creds: creds, logger: logger}
	tcfg := &thirdparty.Config{URL: dest.URL, Token: string(dest.Token), Headers: dest.Format.Header()}
	if _, _, err := d.destinationCredentials(dest, fileNames(dest.Name), tcfg); err != nil {
		return nil, err
	}
	return tcfg, nil
}
