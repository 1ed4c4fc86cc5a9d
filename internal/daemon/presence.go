package daemon

import (
	"context"
	"log/slog"
	"maps"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/presence"
)

// presence says, every presence.Beat until ctx ends, that this daemon runs
// and which generation of each destination's hold (a person's pause or
// resume) it holds: it reads each hold past any cache, has the
// destination's deliverer take it, and only then says so, so that `syncer
// pause` returns once nothing more is sent (internal/presence). On the way
// out it leaves: a stopped daemon is not waited for.
func (d *Daemon) presence(ctx context.Context) {
	t := newGrid(d.started.Add(phasePresence), presence.Beat)
	defer t.Stop()
	failing := false
	var said sayState
	for {
		err := d.sayHolds(ctx, &said)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			d.logger.WarnContext(ctx, "daemon: say which pauses this daemon holds; syncer pause may wait for it until it succeeds",
				slog.String("daemon", d.id), slog.String("error", err.Error()))
		case err == nil && failing:
			failing = false
			d.logger.InfoContext(ctx, "daemon: saying which pauses this daemon holds again", slog.String("daemon", d.id))
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := presence.Leave(lctx, d.pool, d.id); err != nil {
				d.logger.WarnContext(ctx, "daemon: leave the running daemons", slog.String("error", err.Error()))
			}
			return
		case <-t.C():
			t.Next()
		}
	}
}

// sayAgainAfter is how long the presence goes without saying the same
// holds again: well inside presence.Lease (5 s), so that two beats lost
// in a row still leave this daemon alive to the others. Saying is a
// write and a commit (a WAL flush); at every beat it was two of an idle
// daemon's 18 statements a second and the costliest of its periodic
// work (docs/benchmarks.md, "An idle daemon's share").
const sayAgainAfter = 3 * presence.Beat

// sayState is what the presence last said, and when.
type sayState struct {
	held map[string]int64
	at   time.Time
}

// sayHolds reads every destination's hold, has its deliverer take it, and
// says which generation of each this daemon holds: two statements on one
// pooled connection every beat (one a destination, each its own acquire,
// took a connection five times a beat; "Spreading the periodic work" in
// docs/design.md). The saying is skipped while what this daemon holds has
// not changed since it last said it, less than sayAgainAfter ago: a pause
// adopted is still said at the beat that adopted it, so `syncer pause`
// waits no longer.
func (d *Daemon) sayHolds(ctx context.Context, said *sayState) error {
	d.mu.Lock()
	names := make([]string, 0, len(d.dests))
	dests := make([]*destination, 0, len(d.dests))
	namespaces := make([]string, 0, len(d.dests))
	for name, dest := range d.dests {
		names, dests, namespaces = append(names, name), append(dests, dest), append(namespaces, dest.state.namespace)
	}
	d.mu.Unlock()
	return d.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		holds, err := breakerstore.ReadHolds(ctx, c, namespaces)
		if err != nil {
			return err
		}
		held := make(map[string]int64, len(dests))
		for i, dest := range dests {
			held[names[i]] = dest.deliverer.AdoptHold(ctx, holds[i])
		}
		// The tenant sources exported here, by their lanes: the lanes'
		// share counts the daemons that say them (presence.SourceKey).
		for _, n := range d.exp.Exported() {
			if src, _, ok := jobs.LaneOf(n); ok {
				held[presence.SourceKey(src)] = 0
			}
		}
		now := time.Now()
		if said.held != nil && maps.Equal(said.held, held) && now.Sub(said.at) < sayAgainAfter {
			return nil
		}
		if err := presence.Say(ctx, c, d.id, held); err != nil {
			return err
		}
		said.held, said.at = held, now
		return nil
	})
}
