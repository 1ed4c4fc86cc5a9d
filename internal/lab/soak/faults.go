package soak

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// apis are the run's destinations: resources', crm, search, hub and
// hooks.
func (r *run) apis() []*api { return []*api{r.live, r.crm, r.search, r.hub, r.hooks} }

// writeConfig writes the configuration file from the state, whole: a
// daemon reading it meanwhile reads the old file or the new one.
func (r *run) writeConfigLocked() error {
	tmp := r.configPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(configYAML(r.crm.url(), r.search.url(), r.hub.url(), r.hooks.url(), r.cfgState)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, r.configPath)
}

// reconfigure changes the configuration file and sends SIGHUP to every
// daemon running, so the change is read at once rather than within the
// daemons' 10 s.
func (r *run) reconfigure(change func(*configState)) error {
	r.cfgMu.Lock()
	change(&r.cfgState)
	err := r.writeConfigLocked()
	r.cfgMu.Unlock()
	if err != nil {
		return fmt.Errorf("soak: configuration file: %w", err)
	}
	for _, d := range r.daemons {
		d.signal(syscall.SIGHUP)
	}
	return nil
}

// setFake changes one fake's knobs, from the knobs it has now.
func (a *api) setFake(change func(*fakethirdparty.Config)) {
	a.mu.Lock()
	change(&a.cfg)
	cfg := a.cfg
	a.mu.Unlock()
	a.fake.SetConfig(cfg)
}

// injectHeld carries out a fault of issue 42, and undoes it after its
// length. Each records the stretch in which it legitimately holds a source
// or some of its keys, for the stall check.
func (r *run) injectHeld(ctx context.Context, f fault) error {
	switch f.Kind {
	case itemTransient:
		// The keys held are the ids the fakes pick, for the fault's length
		// and their own backoff after it; their neighbours are not held.
		// search answers them 503 or 429 inside its bulk answers, hooks
		// answers their requests 404, as a receiver that does not know the
		// entity yet does.
		share := f.Share
		held := func(id string) bool { return fakethirdparty.ItemFails(id, share) }
		to := r.since() + f.For + keyBackoffGrace
		r.hold(hold{source: sourceSearch, from: r.since(), to: to, keys: held})
		r.hold(hold{source: sourceHooks, from: r.since(), to: to, keys: held})
		r.search.setFake(func(c *fakethirdparty.Config) { c.ItemFailShare, c.ItemFailStatus = f.Share, f.Status })
		r.hooks.setFake(func(c *fakethirdparty.Config) { c.ItemFailShare, c.ItemFailStatus = f.Share, http.StatusNotFound })
		sleep(ctx, f.For)
		r.search.setFake(func(c *fakethirdparty.Config) { c.ItemFailShare, c.ItemFailStatus = 0, 0 })
		r.hooks.setFake(func(c *fakethirdparty.Config) { c.ItemFailShare, c.ItemFailStatus = 0, 0 })
	case slowResponse:
		r.hold(hold{source: sourceHub, from: r.since(), to: r.since() + f.For})
		r.slowLoad(1)
		sleep(ctx, f.For)
		r.slowLoad(-1)
	case configReload:
		return r.reconfigure(func(s *configState) { s.crmInFlight = 7 - max(3, min(4, s.crmInFlight)) })
	case brokenProgram:
		// Held from the breaking edit to the mending one; from then, the
		// edit resumes the destination, which the stall check measures.
		r.hold(hold{source: sourceHub, from: r.since(), to: r.since() + f.For})
		if err := r.reconfigure(func(s *configState) { s.hubBroken = true }); err != nil {
			return err
		}
		sleep(ctx, f.For)
		return r.reconfigure(func(s *configState) { s.hubBroken = false })
	case connectionsLocked:
		// No hold: tickets is outside the stall check (its rows wait,
		// by contract, while their tenant's token cannot be read), and
		// every other source must not notice. A restart of the server
		// meanwhile ends the lock early, as it would an application's.
		return r.lockConnections(ctx, f.For)
	}
	return nil
}

// lockConnections holds ticket_connections ACCESS EXCLUSIVE until d from
// now, in a transaction of the soak's own (its session is spared by
// pgTerminate). A try that cannot connect or lock (the server restarting:
// the schedule often puts pg-restart just before) is tried again until the
// lock can still be held connectionsLockLeast: a fault that silently never
// happens would pass the soak without its case.
func (r *run) lockConnections(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	var err error
	for tries := 1; time.Until(end) >= connectionsLockLeast; tries++ {
		var locked bool
		locked, err = r.holdConnectionsLock(ctx, end)
		if locked {
			if tries > 1 {
				fmt.Fprintf(r.cfg.Progress, "soak: %7s connections-lock taken at its try %d, held to its end\n", r.since(), tries)
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		sleep(ctx, 250*time.Millisecond)
	}
	return err
}

// connectionsLockLeast is the shortest lock worth taking late.
const connectionsLockLeast = 5 * time.Second

// holdConnectionsLock takes the lock and holds it until end; it reports
// whether the lock was held.
func (r *run) holdConnectionsLock(ctx context.Context, end time.Time) (bool, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("soak: lock connections: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	lock := "LOCK TABLE " + pgx.Identifier{"ticket_connections"}.Sanitize() + " IN ACCESS EXCLUSIVE MODE"
	if _, err := tx.Exec(ctx, lock); err != nil {
		return false, fmt.Errorf("soak: lock connections: %w", err)
	}
	sleep(ctx, time.Until(end))
	return true, nil
}

// keyBackoffGrace is how long after a per-item transient ends its keys
// stay exempt from the stall check: the key's own backoff, which may have
// grown to its bound (delivery's MaxElapsed) while the fault lasted.
const keyBackoffGrace = time.Minute

// slowLoad counts the slow-response faults under way, which overlap: hub
// answers with the load while one is.
func (r *run) slowLoad(delta int) {
	r.cfgMu.Lock()
	r.slowLoads += delta
	load := int64(0)
	if r.slowLoads > 0 {
		load = slowResponseLoad
	}
	r.cfgMu.Unlock()
	r.hub.setFake(func(c *fakethirdparty.Config) { c.AnswerLoad = load })
}

// setupConfig writes the first configuration file.
func (r *run) setupConfig() error {
	r.configPath = filepath.Join(r.dir, "syncer.yaml")
	r.cfgMu.Lock()
	defer r.cfgMu.Unlock()
	r.cfgState = configState{crmInFlight: 4}
	return r.writeConfigLocked()
}
