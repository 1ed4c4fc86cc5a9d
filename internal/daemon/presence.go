package daemon

import (
	"context"
	"log/slog"
	"time"

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
	t := time.NewTicker(presence.Beat)
	defer t.Stop()
	failing := false
	for {
		err := d.sayHolds(ctx)
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
		case <-t.C:
		}
	}
}

// sayHolds reads every destination's hold, has its deliverer take it, and
// says which generation of each this daemon holds.
func (d *Daemon) sayHolds(ctx context.Context) error {
	d.mu.Lock()
	dests := make(map[string]*destination, len(d.dests))
	for name, dest := range d.dests {
		dests[name] = dest
	}
	d.mu.Unlock()
	held := make(map[string]int64, len(dests))
	for name, dest := range dests {
		h, err := breakerstore.ReadHold(ctx, d.pool, dest.state.namespace)
		if err != nil {
			return err
		}
		held[name] = dest.deliverer.AdoptHold(ctx, h)
	}
	// The tenant sources exported here, by their lanes: the lanes' share
	// counts the daemons that say them (presence.SourceKey).
	for _, n := range d.exp.Exported() {
		if src, _, ok := jobs.LaneOf(n); ok {
			held[presence.SourceKey(src)] = 0
		}
	}
	return presence.Say(ctx, d.pool, d.id, held)
}
