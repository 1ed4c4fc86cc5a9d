package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/database"
)

// Defaults for Config.
const (
	// RetentionDefault is the default Config.Retention: a week, what
	// support is asked about.
	RetentionDefault = 7 * 24 * time.Hour
	// MaxEntriesDefault is the default Config.MaxEntries: about 2 GiB of
	// table and indexes at a typical entry's size.
	MaxEntriesDefault = 10_000_000
	// ChunkDefault is the default Config.Chunk.
	ChunkDefault = 5000
	// EveryDefault is the default Config.Every.
	EveryDefault = time.Minute
	// PauseDefault is the default Config.Pause.
	PauseDefault = 50 * time.Millisecond
	// TidyQuietDefault is the default Config.TidyQuiet.
	TidyQuietDefault = 2 * time.Second
	// TidyRequestsDefault is the default Config.TidyRequests: at 500
	// items a request, half a million keys not indexed yet, whose arrays
	// a lookup reads in about 10 ms.
	TidyRequestsDefault = 1000
)

// Config configures a Pruner.
type Config struct {
	// Retention is how long entries are kept. Defaults to
	// RetentionDefault.
	Retention time.Duration
	// MaxEntries bounds the entries kept: past it the oldest go first,
	// whatever their age. It is held against PostgreSQL's estimate of the
	// table's live rows (pg_stat_user_tables), which lags by a second or
	// so. Defaults to MaxEntriesDefault.
	MaxEntries int64
	// Chunk is the most entries one DELETE removes. Defaults to
	// ChunkDefault.
	Chunk int
	// Every is how often the Pruner looks for entries to remove. Defaults
	// to EveryDefault.
	Every time.Duration
	// Pause is how long the Pruner waits between two chunks, leaving the
	// disk to the export. Defaults to PauseDefault.
	Pause time.Duration
	// TidyQuiet is how long no request may have been written before the
	// Pruner indexes the keys of those not indexed yet (migration 029):
	// the export pays nothing for it while it drains. Defaults to
	// TidyQuietDefault.
	TidyQuiet time.Duration
	// TidyRequests is how many requests written since the last tidy make
	// the Pruner tidy without waiting for a quiet export: a lookup reads
	// the arrays of every request not indexed yet, so a sustained export
	// must not grow them without bound. Defaults to TidyRequestsDefault.
	TidyRequests int64
	// Logger is where failures are reported. Defaults to discarding.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) validate() error {
	switch {
	case c.Retention < 0:
		return errors.New("history: Retention must not be negative")
	case c.MaxEntries < 0:
		return errors.New("history: MaxEntries must not be negative")
	case c.Chunk < 0:
		return errors.New("history: Chunk must not be negative")
	case c.TidyQuiet < 0, c.TidyRequests < 0:
		return errors.New("history: TidyQuiet and TidyRequests must not be negative")
	}
	return nil
}

// Pruner removes entries past the retention or the size bound, a chunk at
// a time.
type Pruner struct {
	db  database.Querier
	cfg Config
	// tidy is Run's state of the requests' indexing (tidy.go).
	tidy tidyState
}

// NewPruner returns a Pruner of db's history.
func NewPruner(db database.Querier, cfg *Config) (*Pruner, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := *cfg
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.MaxEntries = cmp.Or(c.MaxEntries, MaxEntriesDefault)
	c.Chunk = cmp.Or(c.Chunk, ChunkDefault)
	c.Every = cmp.Or(c.Every, EveryDefault)
	c.Pause = cmp.Or(c.Pause, PauseDefault)
	c.TidyQuiet = cmp.Or(c.TidyQuiet, TidyQuietDefault)
	c.TidyRequests = cmp.Or(c.TidyRequests, TidyRequestsDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Pruner{db: db, cfg: c}, nil
}

// Run prunes every Config.Every, and indexes the newest requests' keys
// when the export is quiet, until ctx ends. Every daemon runs one: their
// chunks skip each other's rows (SKIP LOCKED), and a tidy finds what
// another's left.
func (p *Pruner) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Every)
	defer t.Stop()
	tidy := time.NewTicker(tidyEvery(p.cfg.TidyQuiet))
	defer tidy.Stop()
	prune := func() {
		if _, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.WarnContext(ctx, "history: prune", slog.String("error", err.Error()))
		}
	}
	prune()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tidy.C:
			p.tidyIfDue(ctx)
		case <-t.C:
			prune()
		}
	}
}

// pruneSQL deletes up to $2 entries older than $1, found through the
// time's BRIN index (or from the start of the table, where the oldest
// are); a row another pruner is deleting is left to it. It returns how
// many rows went, and how many entries (the same).
const pruneSQL = `WITH gone AS (DELETE FROM syncer_history WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM syncer_history WHERE at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING 1)
	SELECT count(*), count(*) FROM gone`

// pruneRequestsSQL is pruneSQL for syncer_history_requests: up to $2
// requests, and it returns how many went and their entries (their
// items).
const pruneRequestsSQL = `WITH gone AS (DELETE FROM syncer_history_requests WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM syncer_history_requests WHERE at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING items)
	SELECT count(*), coalesce(sum(items), 0) FROM gone`

// cutoffSQL is the time before which about the share $1 of the entries
// lie, read from a sample of about $2 percent of both tables' blocks, a
// request counting as many entries as it has items: the size bound's
// cutoff, without sorting the tables.
const cutoffSQL = `SELECT percentile_disc($1::float8) WITHIN GROUP (ORDER BY at) FROM (
	SELECT at FROM syncer_history TABLESAMPLE SYSTEM ($2::float8)
	UNION ALL
	SELECT r.at FROM syncer_history_requests r TABLESAMPLE SYSTEM ($2::float8), generate_series(1, r.items)) s`

// sampleRows is about how many entries the size bound's cutoff is read
// from.
const sampleRows = 20_000

// liveSQL is PostgreSQL's running estimate of both tables' rows (exact
// enough for a bound, and free where count(*) reads a table), and the
// mean items of a request, from a sample of about $1 requests.
const liveSQL = `WITH n AS (SELECT
		coalesce((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = to_regclass('syncer_history')), 0) AS entries,
		coalesce((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = to_regclass('syncer_history_requests')), 0) AS requests)
	SELECT n.entries, n.requests, coalesce((SELECT avg(items) FROM syncer_history_requests
		TABLESAMPLE SYSTEM (least(100, 100 * $1::float8 / greatest(n.requests, 1)))), 0)::float8
	FROM n`

// requestChunk is how many requests one DELETE removes, for a Chunk of
// entries: a request holds up to 500.
func (p *Pruner) requestChunk() int { return max(1, p.cfg.Chunk/50) }

// Prune removes what is past the retention, then what is past the size
// bound, oldest first, in chunks, and returns how many entries it
// removed.
func (p *Pruner) Prune(ctx context.Context) (int64, error) {
	cutoff := p.cfg.Now().Add(-p.cfg.Retention)
	total, err := p.pruneBefore(ctx, cutoff, -1)
	if err != nil {
		return total, err
	}
	var entries, requests int64
	var perRequest float64
	if err := p.db.QueryRow(ctx, liveSQL, sampleRows/100).Scan(&entries, &requests, &perRequest); err != nil {
		return total, fmt.Errorf("history: count entries: %w", err)
	}
	// The estimate is read once a round: the entries it finds over the
	// bound are removed, no more, however late the estimate follows,
	// oldest first as far as a sample of their times tells.
	live := entries + int64(float64(requests)*perRequest)
	over := live - p.cfg.MaxEntries
	if over <= 0 {
		return total, nil
	}
	pct := min(100, 100*float64(sampleRows)/float64(live))
	var cut *time.Time
	if err := p.db.QueryRow(ctx, cutoffSQL, float64(over)/float64(live), pct).Scan(&cut); err != nil {
		return total, fmt.Errorf("history: size bound's cutoff: %w", err)
	}
	if cut == nil {
		return total, nil
	}
	n, err := p.pruneBefore(ctx, cut.Add(time.Microsecond), over)
	return total + n, err
}

// pruneBefore removes entries older than before from both tables, a
// chunk at a time, up to limit entries (-1: all of them), and returns
// how many it removed.
func (p *Pruner) pruneBefore(ctx context.Context, before time.Time, limit int64) (int64, error) {
	var total int64
	for _, t := range []struct {
		sql   string
		chunk int
	}{{pruneSQL, p.cfg.Chunk}, {pruneRequestsSQL, p.requestChunk()}} {
		for limit < 0 || total < limit {
			n := t.chunk
			if limit >= 0 && t.sql == pruneSQL {
				n = int(min(int64(n), limit-total))
			}
			var rows, gone int64
			if err := p.db.QueryRow(ctx, t.sql, before, n).Scan(&rows, &gone); err != nil {
				return total, fmt.Errorf("history: prune: %w", err)
			}
			total += gone
			if rows < int64(n) {
				break
			}
			if err := pause(ctx, p.cfg.Pause); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
