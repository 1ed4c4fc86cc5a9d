package sources

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// Stat is one source's state, for status and metrics. It is read from
// syncer's tables alone, never from the application's.
type Stat struct {
	Name        string
	Destination string
	// Table is schema.table.
	Table string
	// PendingKeys counts keys with a change not yet accepted or rejected.
	PendingKeys int64
	// FailedKeys counts keys whose last version sent was rejected and that
	// have not changed since.
	FailedKeys int64
	// OldestPending is the age of the oldest pending change; 0 when none.
	OldestPending time.Duration
	// Snapshot is the snapshot's state.
	Snapshot SnapshotState
	// SnapshotRows counts the rows the snapshot logged so far.
	SnapshotRows int64
	// SnapshotTotal estimates the rows it will log, from the table's
	// statistics at its start (0 when unknown); once done, the rows logged.
	SnapshotTotal int64
	// Error says why the daemon stopped exporting the source; empty while
	// it exports.
	Error string
	// Uncaptured are the partitions of the source's table (qualified) on
	// which a TRUNCATE is not captured, attached or created since migrate
	// (see UncapturedPartitions); the source exports meanwhile.
	Uncaptured []string
	// SnapshotWaiting is how long the snapshot has been pending since
	// migrate installed the source (or a replay restarted it), no daemon
	// having started it; 0 once one has.
	SnapshotWaiting time.Duration
}

// SnapshotWaitLimit is how long a snapshot may wait for a daemon before
// Warning says that none runs the source: a daemon that runs it starts the
// snapshot within seconds of reading the installed sources.
const SnapshotWaitLimit = time.Minute

// Warning says what of the source is not captured, for status and the
// daemon's log; empty when everything is.
func (s Stat) Warning() string {
	var out []string
	if s.SnapshotWaiting >= SnapshotWaitLimit {
		out = append(out, fmt.Sprintf("no daemon has started its snapshot in the %s since it was installed (or restarted): "+
			"no running daemon exports it; a daemon whose configuration file does not name it says so in its log and in syncer_source_unconfigured "+
			"(daemons read their file again every 10 s and on SIGHUP)", s.SnapshotWaiting.Round(time.Second)))
	}
	if len(s.Uncaptured) > 0 {
		out = append(out, "partitions "+strings.Join(s.Uncaptured, ", ")+" were attached or created since syncer migrate: "+
			"a TRUNCATE of one of them alone is not captured (no tombstones), nor are the rows an attached table brought; run syncer migrate")
	}
	return strings.Join(out, "; ")
}

// SnapshotPercent is the snapshot's progress from 0 to 100, or -1 when
// it has not started or its size is unknown.
func (s Stat) SnapshotPercent() float64 {
	switch {
	case s.Snapshot == SnapshotDone || s.Snapshot == SnapshotSkipped:
		return 100
	case s.SnapshotTotal <= 0:
		return -1
	}
	return min(100, 100*float64(s.SnapshotRows)/float64(s.SnapshotTotal))
}

// StatsCountCap bounds how many pending keys Stats counts per source, and
// StatsOldestScan how many of the first pending changes (in key order) the
// oldest pending age is taken from: the daemon's gauges call Stats every few
// seconds on every daemon, and reading each change of a large backlog for
// its age took the server's time from the drain.
const (
	StatsCountCap   = 1_000_000
	StatsOldestScan = 10_000
)

// Stats returns every installed source's state, by name. It counts the
// pending keys of each source from the change log's index (up to
// StatsCountCap), and takes the oldest pending age from its first
// StatsOldestScan changes.
func Stats(ctx context.Context, q database.Querier) ([]Stat, error) {
	rows, err := q.Query(ctx, `SELECT s.name, s.destination, s.schema_name || '.' || s.table_name,
			p.keys, COALESCE(EXTRACT(EPOCH FROM now() - p.oldest), 0)::float8,
			(SELECT count(*) FROM syncer_source_failures f WHERE f.source = s.name
				AND NOT EXISTS (SELECT 1 FROM syncer_changes c WHERE c.source = f.source AND c.num = f.num AND c.key = f.key AND c.tenant IS NOT DISTINCT FROM f.tenant)),
			s.snapshot_state, s.snapshot_rows, s.snapshot_total, COALESCE(s.error, ''),
			-- The partitioned table, quoted, for UncapturedPartitions: asked
			-- apart, since its catalog joins in this statement made the
			-- planner's estimate large enough to compile it (JIT, a second).
			(SELECT format('%I.%I', s.schema_name, s.table_name) FROM pg_catalog.pg_class c
				WHERE c.oid = to_regclass(format('%I.%I', s.schema_name, s.table_name)) AND c.relkind = 'p'),
			CASE WHEN s.snapshot_state = 'pending' THEN EXTRACT(EPOCH FROM now() - s.updated_at) ELSE 0 END::float8
		FROM syncer_sources s
		CROSS JOIN LATERAL (SELECT
			(SELECT count(*) FROM (SELECT DISTINCT c.num, c.key FROM syncer_changes c WHERE c.source = s.name
				ORDER BY c.num, c.key LIMIT $1) k) AS keys,
			(SELECT min(o.changed_at) FROM (SELECT c.changed_at FROM syncer_changes c WHERE c.source = s.name
				ORDER BY c.num, c.key LIMIT $2) o) AS oldest) p
		ORDER BY s.name`, StatsCountCap, StatsOldestScan)
	if err != nil {
		return nil, fmt.Errorf("sources: stats: %w", err)
	}
	var partitioned []*string
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stat, error) {
		var s Stat
		var age, waiting float64
		var part *string
		err := r.Scan(&s.Name, &s.Destination, &s.Table, &s.PendingKeys, &age, &s.FailedKeys, &s.Snapshot, &s.SnapshotRows, &s.SnapshotTotal, &s.Error, &part, &waiting)
		s.OldestPending = time.Duration(age * float64(time.Second))
		s.SnapshotWaiting = time.Duration(waiting * float64(time.Second))
		partitioned = append(partitioned, part)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sources: stats: %w", err)
	}
	schema := ""
	for i, table := range partitioned {
		if table == nil {
			continue
		}
		if schema == "" {
			if err := q.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
				return nil, fmt.Errorf("sources: stats: current schema: %w", err)
			}
		}
		if out[i].Uncaptured, err = uncaptured(ctx, q, *table, triggerNames(objectHash(schema, out[i].Name))[3]); err != nil {
			return nil, fmt.Errorf("sources: stats: source %s: %w", out[i].Name, err)
		}
	}
	return out, nil
}

// Failure is one failed key, for status.
type Failure struct {
	// Tenant is the tenant the key failed at, "" for a source without a
	// tenant column: a key fails at each tenant apart (migration 028).
	Tenant   string
	Key      string
	Version  int64
	FailedAt time.Time
	Error    string
}

// RecentFailures returns the source's most recently failed keys that have
// not changed since.
func RecentFailures(ctx context.Context, q database.Querier, src string, limit int) ([]Failure, error) {
	rows, err := q.Query(ctx, `SELECT COALESCE(f.tenant, ''), f.key, f.version, f.failed_at, f.error FROM syncer_source_failures f
		WHERE f.source = $1
			AND NOT EXISTS (SELECT 1 FROM syncer_changes c WHERE c.source = f.source AND c.num = f.num AND c.key = f.key AND c.tenant IS NOT DISTINCT FROM f.tenant)
		ORDER BY f.failed_at DESC, f.key DESC, f.tenant DESC LIMIT $2`, src, limit)
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: failures: %w", src, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Failure, error) {
		var f Failure
		err := r.Scan(&f.Tenant, &f.Key, &f.Version, &f.FailedAt, &f.Error)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: failures: %w", src, err)
	}
	return out, nil
}

// SetError records why the daemon stopped exporting a source (a schema
// change), for status; an empty text clears it. Nothing is written when
// the text is already the one recorded, so a source that exports costs no
// write per run.
func SetError(ctx context.Context, e database.Querier, src, text string) error {
	_, err := e.Exec(ctx, `UPDATE syncer_sources SET error = NULLIF($2, ''), error_at = CASE WHEN $2 = '' THEN NULL ELSE now() END
		WHERE name = $1 AND COALESCE(error, '') <> $2`, src, text)
	if err != nil {
		return fmt.Errorf("sources: source %s: record error: %w", src, err)
	}
	return nil
}
