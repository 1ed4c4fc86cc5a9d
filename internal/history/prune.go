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
	}
	return nil
}

// Pruner removes entries past the retention or the size bound, a chunk at
// a time.
type Pruner struct {
	db  database.Querier
	cfg Config
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Pruner{db: db, cfg: c}, nil
}

// Run prunes every Config.Every until ctx ends. Every daemon runs one:
// their chunks skip each other's rows (SKIP LOCKED).
func (p *Pruner) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Every)
	defer t.Stop()
	for {
		if _, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.WarnContext(ctx, "history: prune", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneSQL deletes up to $2 entries older than $1, found through the
// time's BRIN index (or from the start of the table, where the oldest
// are); a row another pruner is deleting is left to it.
const pruneSQL = `DELETE FROM syncer_history WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM syncer_history WHERE at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED))`

// cutoffSQL is the time before which about the share $1 of the entries
// lie, read from a sample of about $2 percent of the table's blocks: the
// size bound's cutoff, without sorting the table.
const cutoffSQL = `SELECT percentile_disc($1::float8) WITHIN GROUP (ORDER BY at)
	FROM syncer_history TABLESAMPLE SYSTEM ($2::float8)`

// sampleRows is about how many entries the size bound's cutoff is read
// from.
const sampleRows = 20_000

// liveSQL is PostgreSQL's running estimate of the table's rows: exact
// enough for a bound, and free where count(*) reads the table.
const liveSQL = `SELECT coalesce((SELECT n_live_tup FROM pg_stat_user_tables
	WHERE relid = to_regclass('syncer_history')), 0)`

// Prune removes what is past the retention, then what is past the size
// bound, oldest first, in chunks, and returns how many entries it
// removed.
func (p *Pruner) Prune(ctx context.Context) (int64, error) {
	var total int64
	cutoff := p.cfg.Now().Add(-p.cfg.Retention)
	for {
		n, err := p.chunk(ctx, cutoff, p.cfg.Chunk)
		total += n
		if err != nil || n < int64(p.cfg.Chunk) {
			if err != nil {
				return total, err
			}
			break
		}
		if err := pause(ctx, p.cfg.Pause); err != nil {
			return total, err
		}
	}
	var live int64
	if err := p.db.QueryRow(ctx, liveSQL).Scan(&live); err != nil {
		return total, fmt.Errorf("history: count entries: %w", err)
	}
	// The estimate is read once a round: the entries it finds over the
	// bound are removed, no more, however late the estimate follows,
	// oldest first as far as a sample of their times tells.
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
	for over > 0 {
		n, err := p.chunk(ctx, cut.Add(time.Microsecond), int(min(over, int64(p.cfg.Chunk))))
		total += n
		over -= n
		if err != nil {
			return total, err
		}
		if n == 0 {
			break
		}
		if err := pause(ctx, p.cfg.Pause); err != nil {
			return total, err
		}
	}
	return total, nil
}

func (p *Pruner) chunk(ctx context.Context, before time.Time, n int) (int64, error) {
	tag, err := p.db.Exec(ctx, pruneSQL, before, n)
	if err != nil {
		return 0, fmt.Errorf("history: prune: %w", err)
	}
	return tag.RowsAffected(), nil
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
