package resources

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/database"
)

// Tombstones live in syncer_tombstones (migration 005): one per deleted
// id, pending like a row until the third party accepts it, then kept for a
// retention period so a replay of a range resends the deletes in it, then
// purged. See docs/tombstones.md.

// Defaults for PurgerConfig.
const (
	TombstoneRetentionDefault = 7 * 24 * time.Hour
	PurgeIntervalDefault      = time.Minute
	PurgeBatchDefault         = 1000
)

// PurgeTombstones deletes up to limit synced tombstones that were synced
// more than olderThan ago, and returns how many it deleted. Pending and
// failed tombstones are never purged. It takes the oldest first and skips
// any a writer or the exporter has locked, so it never makes them wait;
// call it repeatedly, in small batches, until it returns less than limit.
func PurgeTombstones(ctx context.Context, db database.Querier, olderThan time.Duration, limit int) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("resources: purge: olderThan must not be negative, got %s", olderThan)
	}
	tag, err := db.Exec(ctx, `DELETE FROM syncer_tombstones WHERE id IN (
			SELECT id FROM syncer_tombstones
			WHERE synced_at IS NOT NULL AND synced_at < now() - make_interval(secs => $1)
			ORDER BY synced_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, olderThan.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("resources: purge tombstones: %w", err)
	}
	return tag.RowsAffected(), nil
}

// PurgerConfig configures a Purger. A nil config takes every default.
type PurgerConfig struct {
	// Retention is how long a synced tombstone is kept
	// (SYNCER_TOMBSTONE_RETENTION). Defaults to TombstoneRetentionDefault.
	Retention time.Duration
	// Interval is the pause between two rounds. Defaults to
	// PurgeIntervalDefault.
	Interval time.Duration
	// Batch is how many tombstones one statement deletes; a round repeats
	// statements until one deletes fewer. Defaults to PurgeBatchDefault.
	Batch int
	// Logger receives a line per round that purged something, and errors.
	// Defaults to discarding.
	Logger *slog.Logger
}

func (c *PurgerConfig) validate() error {
	switch {
	case c.Retention < 0:
		return fmt.Errorf("resources: PurgerConfig.Retention must not be negative, got %s", c.Retention)
	case c.Interval < 0:
		return fmt.Errorf("resources: PurgerConfig.Interval must not be negative, got %s", c.Interval)
	case c.Batch < 0:
		return fmt.Errorf("resources: PurgerConfig.Batch must not be negative, got %d", c.Batch)
	}
	return nil
}

// Purger purges synced tombstones past their retention, a round every
// Interval. Every daemon may run one: rounds of several daemons skip each
// other's rows.
type Purger struct {
	pool *pgxpool.Pool
	cfg  PurgerConfig
}

// NewPurger returns a Purger on pool.
func NewPurger(pool *pgxpool.Pool, cfg *PurgerConfig) (*Purger, error) {
	var c PurgerConfig
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.Retention = cmp.Or(c.Retention, TombstoneRetentionDefault)
	c.Interval = cmp.Or(c.Interval, PurgeIntervalDefault)
	c.Batch = cmp.Or(c.Batch, PurgeBatchDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Purger{pool: pool, cfg: c}, nil
}

// Run purges until ctx is done. Errors are logged and retried next round.
func (p *Purger) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if n, err := p.Round(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.WarnContext(ctx, "resources: purge tombstones failed", slog.String("error", err.Error()))
		} else if n > 0 {
			p.cfg.Logger.InfoContext(ctx, "resources: purged tombstones past retention",
				slog.Int64("tombstones", n), slog.Duration("retention", p.cfg.Retention))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round purges every tombstone due, a batch a statement (each its own
// transaction, so locks are held briefly), and returns how many it purged.
func (p *Purger) Round(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := PurgeTombstones(ctx, p.pool, p.cfg.Retention, p.cfg.Batch)
		total += n
		if err != nil || n < int64(p.cfg.Batch) {
			return total, err
		}
	}
}
