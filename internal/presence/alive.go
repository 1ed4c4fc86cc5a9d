package presence

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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

// AliveSQL is an expression, an array of text, of the daemons alive in
// this schema by name (NewID), for a statement that reads them beside
// what it reads (status's sessions, one statement where they were two);
// Parse turns the names into Processes.
const AliveSQL = `ARRAY(SELECT DISTINCT daemon FROM syncer_daemons WHERE seen_until > now())`

// Processes returns the daemons alive in this schema, by host and process
// id: what tells a schema's daemons from another schema's in the same
// database, where pg_stat_activity shows them all alike.
func Processes(ctx context.Context, q database.Querier) ([]Process, error) {
	var names []string
	if err := q.QueryRow(ctx, `SELECT `+AliveSQL).Scan(&names); err != nil {
		return nil, fmt.Errorf("presence: read daemons: %w", err)
	}
	return Parse(names), nil
}

// Parse is the processes that names (NewID's) tell; a name that tells
// none is left out.
func Parse(names []string) []Process {
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
	return out
}
