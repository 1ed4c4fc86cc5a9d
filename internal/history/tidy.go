package history

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// A request of more than indexAtOnceItems keys (a drain's) is written
// unindexed (migration 029; a hot look's few are indexed by their
// insert, history.go): its keys enter the
// GIN index only when the Pruner marks it, since placing them costs
// PostgreSQL about what an entry a key did, and even appending them to a
// GIN pending list cost 0.27 µs an item, 2% of the drain. Until then a lookup finds it through
// the small index of the unindexed rows and a look at their arrays. The
// Pruner marks them when it costs the export nothing: once no request has
// been written for Config.TidyQuiet. A sustained export is never quiet,
// so past Config.TidyRequests requests since the last tidy it marks them
// anyway, which bounds what a lookup reads.

// tidyEvery is how often the Pruner reads how many requests were written:
// every Config.TidyQuiet (2 s by default), the quiet it waits for, within
// 100 ms and 5 s. It was every second: a periodic statement of every
// daemon, busy or idle, for an index that only bounds what a lookup
// reads (docs/benchmarks.md, "An idle daemon's share").
func tidyEvery(quiet time.Duration) time.Duration {
	return min(max(quiet, 100*time.Millisecond), 5*time.Second)
}

// tidyChunk is how many requests one marking statement indexes: up to
// 50,000 keys at 500 a request, a tenth of a second of PostgreSQL.
const tidyChunk = 100

// insertedSQL is how many rows were ever inserted into the requests'
// table, as PostgreSQL's statistics say (each session adds its own at
// most a second or so late): a number that does not move means a quiet
// export.
// The function pg_stat_user_tables reads n_tup_ins from, without the
// view's joins.
const insertedSQL = `SELECT coalesce(pg_stat_get_tuples_inserted(to_regclass('syncer_history_requests')), 0)`

// tidySQL marks up to $1 unindexed requests indexed, which places their
// keys in the GIN index; a row another Pruner is marking is left to it.
const tidySQL = `WITH m AS (UPDATE syncer_history_requests SET indexed = true WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM syncer_history_requests WHERE NOT indexed LIMIT $1 FOR UPDATE SKIP LOCKED)) RETURNING 1)
	SELECT count(*) FROM m`

// tidyState is what the Pruner knows of the requests written between two
// reads.
type tidyState struct {
	seen    int64     // n_tup_ins at the last read
	movedAt time.Time // when seen last moved
	tidied  int64     // n_tup_ins at the last tidy
}

// tidyIfDue indexes the unindexed requests if some were written since the
// last tidy and either none for Config.TidyQuiet or Config.TidyRequests
// of them.
func (p *Pruner) tidyIfDue(ctx context.Context) {
	st := &p.tidy
	var n int64
	if err := p.db.QueryRow(ctx, insertedSQL).Scan(&n); err != nil {
		if ctx.Err() == nil {
			p.cfg.Logger.WarnContext(ctx, "history: read the requests written", slog.String("error", err.Error()))
		}
		return
	}
	now := p.cfg.Now()
	if n != st.seen {
		st.seen, st.movedAt = n, now
	}
	if n < st.tidied {
		st.tidied = 0 // the statistics were reset
	}
	if n == st.tidied || (now.Sub(st.movedAt) < p.cfg.TidyQuiet && n-st.tidied < p.cfg.TidyRequests) {
		return
	}
	marked, err := p.Tidy(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.cfg.Logger.WarnContext(ctx, "history: tidy", slog.String("error", err.Error()))
		}
		return
	}
	p.cfg.Logger.DebugContext(ctx, "history: tidied the requests' key index", slog.Int64("requests", marked))
	st.tidied = n
}

// Tidy indexes every unindexed request now, a chunk at a time, and
// returns how many it indexed.
func (p *Pruner) Tidy(ctx context.Context) (int64, error) {
	var total int64
	for {
		var n int64
		if err := p.db.QueryRow(ctx, tidySQL, tidyChunk).Scan(&n); err != nil {
			return total, fmt.Errorf("history: index the requests' keys: %w", err)
		}
		total += n
		if n < tidyChunk {
			return total, nil
		}
		if err := pause(ctx, p.cfg.Pause); err != nil {
			return total, err
		}
	}
}
