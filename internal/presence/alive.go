package presence

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

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

// Process is a daemon alive, as its name tells it (NewID): the host it
// runs on and its process id.
type Process struct {
	Host string
	PID  int
}

// Processes returns the daemons alive in this schema, by host and process
// id: what tells a schema's daemons from another schema's in the same
// database, where pg_stat_activity shows them all alike.
func Processes(ctx context.Context, q database.Querier) ([]Process, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT daemon FROM syncer_daemons WHERE seen_until > now()`)
	if err != nil {
		return nil, fmt.Errorf("presence: read daemons: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("presence: read daemons: %w", err)
	}
	out := make([]Process, 0, len(names))
	for _, n := range names {
		host, rest, ok := strings.Cut(n, ":")
		if !ok {
			continue
		}
		p, _, _ := strings.Cut(rest, ":")
		if pid, err := strconv.Atoi(p); err == nil {
			out = append(out, Process{Host: host, PID: pid})
		}
	}
	return out, nil
}
