package status

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/presence"
)

// DaemonSessions is what one syncer process holds of the database (contract
// section 12, "Sessions"): its server sessions and the advisory locks held
// on them. A process is told by the application_name its sessions carry
// (database.ApplicationName: role, host, process id); sessions named
// otherwise (a URL's own application_name) are not counted.
type DaemonSessions struct {
	Role    string `json:"role"`
	Host    string `json:"host"`
	Process int    `json:"process"`
	// Sessions counts its server sessions in the database; Active those
	// running a statement now.
	Sessions int `json:"sessions"`
	Active   int `json:"active"`
	// Locks counts the advisory locks its sessions hold (session-level
	// and transactions' own), and the locks it holds by a lease alone
	// (through a transaction pooler without SYNCER_DIRECT_URL: rows of
	// syncer_lock_leases naming its application_name).
	Locks int `json:"locks"`
}

// readSessions reads the sessions of this schema's daemons alive (those
// syncer_daemons names), but process self's (the status command's own):
// one statement on pg_stat_activity, pg_locks, the locks' leases
// (locks.LeasesHeldSQL) and the presence (presence.AliveSQL).
// pg_stat_activity shows the daemons of every schema of the database
// alike (two installations side by side, SYNCER_SCHEMA), so the rest are
// left out, as are the command line's short-lived processes.
func readSessions(ctx context.Context, q database.Querier, self int) ([]DaemonSessions, error) {
	// Through a transaction pooler without SYNCER_DIRECT_URL a daemon may
	// have no server session named after it at a given instant (a pooled
	// one carries the name of its last client), yet hold locks by their
	// lease rows alone: it is listed by those. The daemons alive ride on
	// every row (an uncorrelated subquery, run once): no row, no session
	// to show.
	rows, err := q.Query(ctx, `WITH s AS (
			SELECT a.application_name AS app, count(*)::int AS sessions, count(*) FILTER (WHERE a.state = 'active')::int AS active,
				coalesce(sum((SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted)), 0)::int AS locks
			FROM pg_stat_activity a
			WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
			GROUP BY a.application_name),
		le AS (`+locks.LeasesHeldSQL+`)
		SELECT coalesce(s.app, le.app, ''), coalesce(s.sessions, 0), coalesce(s.active, 0), coalesce(s.locks, 0) + coalesce(le.leases, 0),
			`+presence.AliveSQL+`
		FROM s FULL JOIN le ON le.app = s.app`)
	if err != nil {
		return nil, fmt.Errorf("status: sessions: %w", err)
	}
	type row struct {
		App                     string
		Sessions, Active, Locks int
		Alive                   []string
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("status: sessions: %w", err)
	}
	out := []DaemonSessions{}
	var alive []presence.Process
	if len(all) > 0 {
		alive = presence.Parse(all[0].Alive)
	}
	for _, r := range all {
		role, host, pid, ok := database.ParseApplicationName(r.App)
		if !ok || role == "" || pid == self || !slices.ContainsFunc(alive, func(p presence.Process) bool {
			// The name's host may be cut to fit application_name.
			return p.PID == pid && strings.HasPrefix(p.Host, host)
		}) {
			continue
		}
		out = append(out, DaemonSessions{Role: role, Host: host, Process: pid, Sessions: r.Sessions, Active: r.Active, Locks: r.Locks})
	}
	slices.SortFunc(out, func(a, b DaemonSessions) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Process, b.Process), cmp.Compare(a.Role, b.Role))
	})
	return out, nil
}
