// Package daemon wires syncer's long-running parts together: the River
// client with the export workers, the outbox relay, periodic gauges, and the
// health, metrics and pprof server.
//
// New builds everything and starts nothing (as River's NewClient); Run
// starts it, and owns the shutdown order: stop taking new batches, let River
// finish (soft stop, then cancel), then the rest. A Daemon runs once.
//
// A file a job: daemon.go the Daemon, its start and its stop; build.go
// the parts' wiring; river.go River's start and policies; guard.go the
// locks' check before a request; serve.go the HTTP server; phase.go the
// periodic loops' phases; the loops in presence.go, gauges.go, tidy.go and
// tenants.go; destinations, credentials, reloads and verify in theirs.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/presence"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
	"github.com/syncer-dev/syncer/migrations"
)

// Daemon is a built, not yet running, syncer daemon.
type Daemon struct {
	cfg    Config
	pool   *pgxpool.Pool
	logger *slog.Logger
	schema string

	reg     *prometheus.Registry
	metrics *metrics.Metrics
	// mu guards what a reload replaces (reload.go) and the gauges read:
	// dests, cfg.Sources and addr.
	mu sync.Mutex
	// dests are the destinations, by name: their deliverers, their HTTP
	// clients (closed by Run), and their facts that the gauges refresh.
	dests map[string]*destination
	// inFlight is the default destination's requests in flight, for the
	// start's log line.
	inFlight int
	// installation is the installation's id, which salts every key.
	installation string
	// id names this process among the running daemons (presence.go).
	id     string
	exp    *exporter.Exporter
	locker *locks.Locker
	purger *resources.Purger
	// pruner removes the rows' stories past their retention or bound.
	pruner *history.Pruner
	river  *river.Client[pgx.Tx]
	relay  *outbox.Relay

	riverRunning atomic.Bool
	ran          atomic.Bool
	// started is when Run started the periodic work, River just before:
	// the origin of each loop's phase (phase.go).
	started time.Time

	// creds holds the destinations' secrets and certificate files, read
	// again when they change and on Reload (SIGHUP).
	creds *credentials.Set

	// addr is the bound HTTP address, for Ready after a reload; console
	// is the console served (reload.go).
	addr    string
	console consoleHolder

	// gaugesMu, a one-slot semaphore (a ctx can end the wait), lets one
	// refresh of the gauges run at a time: the tick's or a scrape's
	// (gauges.go). It guards gaugesAt, tenantGaugesAt and warned.
	gaugesMu chan struct{}
	// gaugesAt is when the last successful refresh started;
	// tenantGaugesAt the last that read the tenants' counts.
	gaugesAt, tenantGaugesAt time.Time
	// warned is the warning last logged per source, so a warning is
	// logged once, not at every refresh.
	warned map[string]string

	// queries bounds the tenants queries of every destination's
	// registry together: at most tenants.QueryConnsDefault connections of
	// the pool, whatever the lanes (docs/protocol.md section 10.1).
	queries *tenants.QueryGate

	// verify is background verification's sources (verify.go); verifier
	// its loop.
	verify   verifyJobs
	verifier *verify.Background
}

// New checks that the database is migrated and builds the daemon's parts:
// nothing runs, listens or connects beyond the checks until Run.
func New(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Daemon, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: c, pool: pool, logger: c.Logger, warned: map[string]string{}, gaugesMu: make(chan struct{}, 1), creds: credentials.NewSet(c.Logger), id: presence.NewID(),
		queries: tenants.NewQueryGate(tenants.QueryConnsDefault)}

	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	if err := database.CheckMigrated(ctx, pool, all[len(all)-1].Version); err != nil {
		return nil, err
	}
	if d.schema, err = database.CurrentSchema(ctx, pool); err != nil {
		return nil, err
	}

	d.reg = prometheus.NewRegistry()
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.metrics = metrics.New(d.reg)
	// The pool is bounded (docs/design.md, "Sessions"): its waits say
	// what the bound costs.
	metrics.WatchPool(d.reg, func() metrics.PoolStat { return poolStat(pool.Stat()) })

	// Without ThirdParty.URL (a SYNCER_CONFIG alone) resources are not
	// exported: no client, no live sync.
	if err := d.build(ctx); err != nil {
		d.closeClients()
		return nil, err
	}
	return d, nil
}

func (d *Daemon) closeClients() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dest := range d.dests {
		dest.client.Close()
		if dest.tenants != nil {
			// Its rows' reads behind the batches end with it.
			dest.tenants.Close()
		}
	}
}

// warmTimeout bounds the opening of the lock sessions at the start: a
// slow server delays the start by this at most, and the first jobs open
// what is missing.
const warmTimeout = 5 * time.Second

// Run runs the daemon until ctx is cancelled, then shuts down in order and
// returns nil. It fails only if the daemon cannot start.
func (d *Daemon) Run(ctx context.Context) error {
	if d.ran.Swap(true) {
		return errors.New("daemon: Run called twice")
	}
	defer d.closeClients()
	c, logger := &d.cfg, d.logger

	srv, addr, err := d.serve(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.addr = addr
	d.mu.Unlock()
	defer func() {
		if srv != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
		}
	}()

	runCtx, stopAux := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAux()
	// The first jobs find their lock sessions open: a row written just
	// after the start waits for no connection's set-up.
	wctx, cancelWarm := context.WithTimeout(ctx, warmTimeout)
	d.locker.Warm(wctx)
	cancelWarm()
	if err := d.startRiver(ctx, runCtx); err != nil {
		d.locker.Close()
		if ctx.Err() != nil {
			return nil // stopped before it ran
		}
		return fmt.Errorf("daemon: start river: %w", err)
	}
	d.riverRunning.Store(true)

	// Each periodic loop at its own phase from here (phase.go).
	d.started = time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.relay.Run(runCtx) })
	wg.Go(func() { d.gauges(runCtx) })
	wg.Go(func() { d.phased(runCtx, phasePurge, d.purger.Run) })
	wg.Go(func() { d.phased(runCtx, phaseHistory, d.pruner.Run) })
	wg.Go(func() { d.presence(runCtx) })
	wg.Go(func() { d.phased(runCtx, phaseVerify, d.verifier.Run) })
	wg.Go(func() { d.tidyTenants(runCtx) })
	wg.Go(func() { d.rereadTenants(runCtx) })
	if err := d.relay.Kick(ctx); err != nil {
		logger.WarnContext(ctx, "daemon: initial sync kick failed; the relay's poll will retry", slog.String("error", err.Error()))
	}
	logger.InfoContext(ctx, "daemon: running", slog.String("schema", d.schema), slog.String("daemon", d.id), slog.String("http_addr", cmp.Or(addr, HTTPAddrOff)),
		slog.String("thirdparty", thirdparty.RedactURL(c.ThirdParty.URL)), slog.Int("batch_size", d.exp.BatchSize()),
		slog.Int("max_in_flight", d.inFlight), slog.Bool("transaction_pooling", c.Stateless))
	if c.Stateless {
		if advice, err := database.RoleAdvice(ctx, d.pool); err == nil && advice != "" {
			logger.WarnContext(ctx, "daemon: the role lacks a setting a transaction pooler needs", slog.String("advice", advice))
		}
	}
	if c.Ready != nil {
		c.Ready(addr)
	}

	<-ctx.Done()
	logger.InfoContext(ctx, "daemon: shutting down", slog.Duration("timeout", c.ShutdownTimeout))
	d.exp.Shutdown()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownTimeout)
	err = d.river.Stop(stopCtx)
	cancel()
	if err != nil {
		logger.WarnContext(ctx, "daemon: batch in flight did not finish in time; cancelling it (it is recorded and will be resent)")
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = d.river.StopAndCancel(cctx)
		cancel()
	}
	d.riverRunning.Store(false)
	stopAux()
	wg.Wait()
	d.locker.Close()
	logger.InfoContext(ctx, "daemon: stopped")
	return nil
}

// Run builds a daemon on pool and runs it until ctx is cancelled: New then
// (*Daemon).Run.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg *Config) error {
	d, err := New(ctx, pool, cfg)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}
