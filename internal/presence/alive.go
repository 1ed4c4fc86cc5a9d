package presence

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/database"
)

// Alive returns how many daemons are running (said so within their Lease)
// and export to destination, or, given SourceKey(source), export that
// tenant source: its lanes are shared among them (exporter.Config.Peers).
func Alive(ctx context.Context, q database.Querier, destination string) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(DISTINCT daemon) FROM syncer_daemons
		WHERE destination = $1 AND seen_until > now()`, destination).Scan(&n); err != nil {
		return 0, fmt.Errorf("presence: count daemons: %w", err)
	}
	return n, nil
}

// SourceKey is the name a daemon says it runs under for each tenant source
// it exports, beside its destinations: "source:" and the source's name (no
// destination's name holds a colon). The lanes are shared among the
// daemons that export the source, not among those that send to its
// destination: a daemon whose configuration lacks the source (a rolling
// deploy that adds it) would be counted in the share and take none, and
// the lanes past the others' share would wait for it.
func SourceKey(source string) string { return "source:" + source }
