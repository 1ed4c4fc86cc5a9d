package presence

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/database"
)

// Alive returns how many daemons are running (said so within their Lease)
// and export to destination: a tenant source's lanes are shared among
// them (exporter.Config.Peers).
func Alive(ctx context.Context, q database.Querier, destination string) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(DISTINCT daemon) FROM syncer_daemons
		WHERE destination = $1 AND seen_until > now()`, destination).Scan(&n); err != nil {
		return 0, fmt.Errorf("presence: count daemons: %w", err)
	}
	return n, nil
}
