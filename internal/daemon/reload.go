package daemon

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// A reload in place. What a reload can change is the configuration file
// (its destinations and sources) and what migrate installed of its
// sources; the flags and the environment are read once. So a running
// daemon takes a new file without stopping: its River client, relay,
// locks and HTTP server run on; a destination whose entry is unchanged
// keeps its deliverer (its limits, breaker and what it learned of the third
// party), and the sources on it keep their jobs; a changed destination is
// built anew and swapped in, and only the jobs of the sources it, or the
// reload, changed are stopped, each within exporter's AbandonAfter, or
// abandoned then (exporter/reload.go). No reload waits for a shutdown
// timeout.

// reconfigure applies next, the daemon's configuration for the file as
// read again, to the running daemon. Nothing is replaced when it fails: a
// destination that does not build, a source not installed.
func (d *Daemon) reconfigure(ctx context.Context, next *Config) error {
	start := time.Now()
	nc := next.withDefaults()
	if err := nc.validate(); err != nil {
		return err
	}
	d.mu.Lock()
	prev := d.dests
	d.mu.Unlock()
	dests, fresh, err := d.buildDestinations(d.installation, nc.Sources, prev)
	if err != nil {
		return err
	}
	closeFresh := func() {
		for _, f := range fresh {
			f.client.Close()
		}
	}
	srcs, err := d.buildSources(ctx, nc.Sources, dests)
	if err != nil {
		closeFresh()
		return err
	}
	changed, err := d.exp.Swap(srcs)
	if err != nil {
		closeFresh()
		return err
	}
	d.mu.Lock()
	d.dests, d.cfg.Sources = dests, nc.Sources
	addr := d.addr
	d.mu.Unlock()

	abandoned := d.exp.Stop(ctx, changed)
	var rebuilt []string
	for name, p := range prev {
		if dests[name] != p {
			// A job abandoned on it may still use it: only its idle
			// connections go.
			p.client.Close()
			rebuilt = append(rebuilt, name)
		}
	}
	slices.Sort(rebuilt)
	slices.Sort(changed)
	var added []string
	for name := range dests {
		if prev[name] == nil {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	if nc.Console != nil && d.console.started() {
		if err := d.console.set(ctx, nc.Console, d.metrics); err != nil {
			d.logger.WarnContext(ctx, "daemon: reload: the console did not build; the previous one is served", slog.String("error", err.Error()))
		}
	}
	d.metrics.Config.LastReloadSuccessful.Set(1)
	d.metrics.Config.LastReloadTime.SetToCurrentTime()
	d.logger.InfoContext(ctx, "daemon: configuration reloaded in place: the sources it changed start again with it, the others kept exporting",
		slog.String("sources_restarted", strings.Join(changed, ",")), slog.String("sources_abandoned", strings.Join(abandoned, ",")),
		slog.String("destinations_rebuilt", strings.Join(rebuilt, ",")), slog.String("destinations_added", strings.Join(added, ",")),
		slog.String("sources", strings.Join(d.sourceNames(), ",")), slog.Duration("took", time.Since(start).Round(time.Millisecond)))
	// Added sources, and changed ones with rows pending, get their jobs now
	// rather than at the relay's next poll.
	if d.riverRunning.Load() {
		if err := d.relay.Kick(ctx); err != nil {
			d.logger.WarnContext(ctx, "daemon: reload: sync kick failed; the relay's poll will retry", slog.String("error", err.Error()))
		}
		if d.cfg.Ready != nil {
			d.cfg.Ready(addr)
		}
	}
	return nil
}

// running returns what the gauges read of the destinations and the file,
// as the last reload left them.
func (d *Daemon) running() ([]destinationState, *config.Config) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]destinationState, 0, len(d.dests))
	for _, name := range slices.Sorted(maps.Keys(d.dests)) {
		out = append(out, d.dests[name].state)
	}
	return out, d.cfg.Sources
}

// certificatesNow returns the destinations' certificates, as the last
// reload left them.
func (d *Daemon) certificatesNow() []*destinationCertificates {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*destinationCertificates
	for _, name := range slices.Sorted(maps.Keys(d.dests)) {
		if c := d.dests[name].certs; c != nil {
			out = append(out, c)
		}
	}
	return out
}

// consoleHolder serves the console as the last configuration built it
// (it names the file's destinations' formats).
type consoleHolder struct {
	mu     sync.Mutex
	parent context.Context
	h      http.Handler
	cancel context.CancelFunc
}

// set builds the console with build and serves it from now on; the first
// call's ctx bounds every console it builds.
func (c *consoleHolder) set(ctx context.Context, build ConsoleFunc, m *metrics.Metrics) error {
	c.mu.Lock()
	if c.parent == nil {
		c.parent = ctx
	}
	parent := c.parent
	c.mu.Unlock()
	cctx, cancel := context.WithCancel(parent)
	h, err := build(cctx, m)
	if err != nil {
		cancel()
		return err
	}
	c.mu.Lock()
	prev := c.cancel
	c.h, c.cancel = h, cancel
	c.mu.Unlock()
	if prev != nil {
		prev()
	}
	return nil
}

func (c *consoleHolder) started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h != nil
}

func (c *consoleHolder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	h := c.h
	c.mu.Unlock()
	h.ServeHTTP(w, r)
}
