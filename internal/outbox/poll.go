package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// FastPollDefault is the default for Config.FastPoll.
const FastPollDefault = 20 * time.Millisecond

// outboxTopSQL reads the newest event's id, 0 for none: a walk down the
// primary key's last page, the cheapest question that tells whether an
// event was appended since the last one.
const outboxTopSQL = `SELECT coalesce(max(id), 0) FROM syncer_outbox`

// pollOutbox is listen for a relay without LISTEN (Config.NoListen): no
// connection may hold session state (a pooler in transaction mode, no
// SYNCER_DIRECT_URL), so nothing hears the writers' notifications. It
// reads the newest event's id every FastPoll, while this daemon exports
// some source, and runs a round, as a notification would, when it grew.
// The gate's lease is renewed as when listening: writers append the events
// the poll looks for only while it is valid.
func (r *Relay) pollOutbox(ctx context.Context, bo backoff.BackOff) error {
	r.renewGate(ctx)
	renewed := time.Now()
	var top int64
	if err := r.pool.QueryRow(ctx, outboxTopSQL).Scan(&top); err != nil {
		return fmt.Errorf("outbox: poll: %w", err)
	}
	bo.Reset()
	r.setConnected(true)
	r.logger.DebugContext(ctx, "outbox: polling, no LISTEN", slog.Duration("every", r.cfg.FastPoll))
	// Whatever happened before is found by a poll.
	if err := r.Poll(ctx); err != nil && ctx.Err() == nil {
		r.logger.WarnContext(ctx, "outbox: poll failed", slog.String("error", err.Error()))
	}
	polled := time.Now()
	ticker := time.NewTicker(r.cfg.FastPoll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		if time.Since(renewed) >= r.cfg.LeaseTTL/3 {
			r.renewGate(ctx)
			renewed = time.Now()
		}
		if time.Since(polled) >= r.cfg.PollInterval {
			if err := r.Poll(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: poll failed", slog.String("error", err.Error()))
			}
			polled = time.Now()
			continue
		}
		if len(r.exp.Exported()) == 0 {
			continue
		}
		var now int64
		if err := r.pool.QueryRow(ctx, outboxTopSQL).Scan(&now); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("outbox: poll: %w", err)
		}
		if now == top {
			continue
		}
		top = now
		r.update(func(s *Stats) { s.Notifications++ })
		if err := r.Notified(ctx); err != nil && ctx.Err() == nil {
			r.logger.WarnContext(ctx, "outbox: relay failed", slog.String("error", err.Error()))
		}
	}
}
