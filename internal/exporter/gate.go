package exporter

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/outbox"
)

// gate is the outbox's gate (outbox.SetArmed) as the jobs lingering here
// move it: shut while every feed of the process has a job polling hot
// (writers need not notify), open as soon as one waits cold.
type gate struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// feeds counts the sources this exporter exports.
	feeds func() int

	mu sync.Mutex
	// hot counts the jobs lingering hot, by feed.
	hot map[string]int
}

func newGate(pool *pgxpool.Pool, logger *slog.Logger, feeds func() int) *gate {
	return &gate{pool: pool, logger: logger, feeds: feeds, hot: map[string]int{}}
}

// noteHot notes the job of feed name, holding lk, hot and shuts the gate
// once every feed of the process has a job lingering hot: the gate is one
// for every feed, and a feed whose job waits cold needs its writers'
// notifications.
func (g *gate) noteHot(ctx context.Context, name string, lk *locks.Lock) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hot[name]++
	if len(g.hot) < g.feeds() {
		return nil
	}
	err := lk.WithTx(ctx, func(tx pgx.Tx) error { return outbox.SetArmed(ctx, tx, false) })
	if err != nil {
		if g.hot[name]--; g.hot[name] <= 0 {
			delete(g.hot, name)
		}
	}
	return err
}

// settled reports whether every transaction that was running when the
// gate opened (opened: the xmax of a snapshot taken just after) has ended.
// A failed look says not yet.
func (g *gate) settled(ctx context.Context, opened string) bool {
	if opened == "" {
		return true
	}
	var done bool
	err := g.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::xid8`, opened).Scan(&done)
	return err == nil && done
}

// noteCold notes a job of feed name no longer hot and opens the gate. It
// needs no lock: an open gate only makes writers notify. It returns the
// xmax of a snapshot taken once the gate is open (see settled), or "" when
// it could not be read.
func (g *gate) noteCold(ctx context.Context, name string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hot[name]--; g.hot[name] <= 0 {
		delete(g.hot, name)
	}
	ctx = context.WithoutCancel(ctx)
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error { return outbox.SetArmed(ctx, tx, true) })
	if err != nil {
		g.logger.WarnContext(ctx, "exporter: open the gate", slog.String("error", err.Error()))
		return "", err
	}
	// Taken after the commit: a writer that read the gate shut did so
	// before it, and had its transaction id by then.
	var opened string
	if err := g.pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&opened); err != nil {
		opened = ""
	}
	return opened, nil
}
