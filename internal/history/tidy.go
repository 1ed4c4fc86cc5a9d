package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The requests' GIN index keeps its pending list on (migration 029): an
// insert appends its keys there, cheaply, and a lookup reads the list
// whole. Moving the list into the index's tree costs PostgreSQL about
// what indexing a key at a time would have cost the insert, so the Pruner
// does it when it costs the export nothing: once no request has been
// written for Config.TidyQuiet. A sustained export is never quiet, so
// past Config.TidyRequests requests since the last tidy it tidies anyway,
// which bounds what a lookup reads.

// tidyEvery is how often the Pruner reads how many requests were written.
const tidyEvery = time.Second

// insertedSQL is how many rows were ever inserted into the requests'
// table, as PostgreSQL's statistics say (each session adds its own at
// most a second or so late): a number that does not move means a quiet
// export.
const insertedSQL = `SELECT coalesce((SELECT n_tup_ins FROM pg_stat_user_tables
	WHERE relid = to_regclass('syncer_history_requests')), 0)`

// tidySQL moves the pending list into the index's tree
// (gin_clean_pending_list, as the schema's owner: migration 029). A
// cleanup another session runs is waited for, then finds little left.
const tidySQL = `SELECT syncer_history_tidy()`

// tidyState is what the Pruner knows of the pending list between two
// reads.
type tidyState struct {
	seen     int64     // n_tup_ins at the last read
	movedAt  time.Time // when seen last moved
	tidied   int64     // n_tup_ins at the last tidy
	disabled bool      // the role may not tidy: left to autovacuum
}

// tidyIfDue tidies the pending list if requests were written since the
// last tidy and either none for Config.TidyQuiet or Config.TidyRequests
// of them.
func (p *Pruner) tidyIfDue(ctx context.Context) {
	st := &p.tidy
	if st.disabled {
		return
	}
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
	pages, err := p.Tidy(ctx)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			// EXECUTE revoked from this role: autovacuum (and the
			// pending list's own bound) do it.
			st.disabled = true
		}
		if ctx.Err() == nil {
			p.cfg.Logger.WarnContext(ctx, "history: tidy", slog.String("error", err.Error()))
		}
		return
	}
	p.cfg.Logger.DebugContext(ctx, "history: tidied the requests' key index",
		slog.Int64("pages", pages), slog.Int64("requests", n-st.tidied))
	st.tidied = n
}

// Tidy moves the requests' pending keys into the GIN index's tree now,
// and returns how many pages of the pending list it emptied.
func (p *Pruner) Tidy(ctx context.Context) (int64, error) {
	var pages int64
	if err := p.db.QueryRow(ctx, tidySQL).Scan(&pages); err != nil {
		return 0, fmt.Errorf("history: tidy the requests' key index: %w", err)
	}
	return pages, nil
}
