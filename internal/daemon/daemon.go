// Package daemon wires syncer's long-running parts together: the River
// client with the export workers, the outbox relay, periodic gauges, and the
// health, metrics and pprof server.
//
// New builds everything and starts nothing (as River's NewClient); Run
// starts it, and owns the shutdown order: stop taking new batches, let River
// finish (soft stop, then cancel), then the rest. A Daemon runs once.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/jobs"
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

// build wires the push path, River and the relay.
func (d *Daemon) build(ctx context.Context) error {
	c, logger := &d.cfg, d.logger
	// The installation's id salts every key: read once, never changed.
	installation, err := checkpoint.Installation(context.Background(), d.pool)
	if err != nil {
		return err
	}
	d.installation = installation
	dests, _, err := d.buildDestinations(installation, c.Sources, nil)
	if err != nil {
		return err
	}
	d.dests = dests
	if def := dests[metrics.DefaultDestination]; def != nil {
		d.inFlight = def.deliverer.MaxInFlight()
	}
	srcs, err := d.buildSources(ctx, c.Sources, dests)
	if err != nil {
		return err
	}
	// Leased locks: a frozen holder loses its locks to a waiting daemon
	// (see internal/locks, "Leases"). Every lock on one session; their
	// transactions on the pool (docs/design.md, "Sessions").
	// With SYNCER_DIRECT_URL, the holder is its session (Config.Session);
	// through a transaction pooler without it, the locks are leases alone
	// (docs/design.md, "Transaction pooling without a direct URL").
	session := cmp.Or(c.Session, d.pool.Config().ConnConfig)
	if d.locker, err = locks.New(session, &locks.Config{Logger: logger, Lease: true, Pool: d.pool, Stateless: c.Stateless, LeasesOnly: c.NoSession}); err != nil {
		return err
	}
	ecfg := c.Exporter
	ecfg.Logger, ecfg.Metrics, ecfg.Schema, ecfg.Installation = logger, d.metrics, d.schema, installation
	ecfg.Sources = srcs
	if ecfg.Peers == nil {
		// A tenant source's lanes are shared among the daemons alive
		// that export it.
		ecfg.Peers = func(ctx context.Context, source string) (int, error) {
			return presence.Alive(ctx, d.pool, presence.SourceKey(source))
		}
	}
	// A lingering job holds a worker slot: one slot stays for the jobs
	// that come and go (the sources that find none).
	slots := c.Workers + extraLanes(c.Sources)
	ecfg.MaxLingering = cmp.Or(ecfg.MaxLingering, max(slots-1, 1))
	if d.exp, err = exporter.New(d.pool, d.locker, &ecfg); err != nil {
		return err
	}
	if d.purger, err = resources.NewPurger(d.pool, &resources.PurgerConfig{Retention: c.TombstoneRetention, Logger: logger}); err != nil {
		return err
	}
	hcfg := c.History
	hcfg.Logger = logger
	if d.pruner, err = history.NewPruner(d.pool, &hcfg); err != nil {
		return err
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, d.exp.Worker())
	river.AddWorker(workers, d.exp.PreviousSyncWorker())
	river.AddWorker(workers, d.exp.PreviousReplayWorker())
	d.river, err = river.NewClient(riverpgxv5.New(d.pool), &river.Config{
		Schema:               d.schema,
		Queues:               map[string]river.QueueConfig{jobs.Queue: {MaxWorkers: slots}},
		Workers:              workers,
		FetchCooldown:        10 * time.Millisecond,
		FetchPollInterval:    200 * time.Millisecond,
		RescueStuckJobsAfter: RescueStuckJobsDefault,
		MaxAttempts:          jobs.MaxAttempts,
		RetryPolicy:          cappedRetry{max: 30 * time.Second},
		// River polls, in every mode: its listener would be a server
		// session of its own, held idle, and through a transaction pooler
		// would hear nothing. The relay, which listens on the session,
		// wakes the jobs lingering here (docs/design.md, "Transaction
		// pooling", "River polls in direct mode too").
		PollOnly: true,
		Logger:   slog.New(atLeast{logger.Handler(), slog.LevelWarn}).With(slog.String("component", "river")),
	})
	if err != nil {
		return fmt.Errorf("daemon: river client: %w", err)
	}

	if d.verifier, err = verify.NewBackground(d.pool, d.locker, &verify.BackgroundConfig{Schema: d.schema,
		Jobs: d.verifyJobs, Ended: d.verifyEnded, Tick: c.VerifyTick, Logger: logger}); err != nil {
		return err
	}

	d.relay, err = outbox.New(d.pool, d.river, d.exp, &outbox.Config{
		Channel:      migrations.Channel(d.schema),
		LockKey:      locks.RelayKey(d.schema),
		PollInterval: c.PollInterval,
		Listen:       session,
		NoListen:     c.NoSession,
		Logger:       logger,
	})
	return err
}

// warmTimeout bounds the opening of the lock sessions at the start: a
// slow server delays the start by this at most, and the first jobs open
// what is missing.
const warmTimeout = 5 * time.Second

// riverStartWait is how long the start tries River's first connection
// again: a daemon started while PostgreSQL restarts meets it there.
const riverStartWait = 30 * time.Second

// startRiver starts River, trying again with backoff while its first
// connection fails (River stops what it started before it returns an
// error, so it can be started again), until riverStartWait or ctx ends.
func (d *Daemon) startRiver(ctx, runCtx context.Context) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, riverStartWait
	return backoff.RetryNotify(func() error { return d.river.Start(runCtx) }, backoff.WithContext(b, ctx),
		func(err error, wait time.Duration) {
			d.logger.WarnContext(ctx, "daemon: start river: trying again", slog.Duration("in", wait), slog.String("error", err.Error()))
		})
}

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

	var wg sync.WaitGroup
	wg.Go(func() { _ = d.relay.Run(runCtx) })
	wg.Go(func() { d.gauges(runCtx) })
	wg.Go(func() { d.purger.Run(runCtx) })
	wg.Go(func() { d.pruner.Run(runCtx) })
	wg.Go(func() { d.presence(runCtx) })
	wg.Go(func() { d.verifier.Run(runCtx) })
	wg.Go(func() { d.tidyTenants(runCtx) })
	wg.Go(func() { d.rereadTenants(runCtx) })
	if err := d.relay.Kick(ctx); err != nil {
		logger.WarnContext(ctx, "daemon: initial sync kick failed; the relay's poll will retry", slog.String("error", err.Error()))
	}
	logger.InfoContext(ctx, "daemon: running", slog.String("schema", d.schema), slog.String("daemon", d.id), slog.String("http_addr", cmp.Or(addr, HTTPAddrOff)),
		slog.String("thirdparty", thirdparty.RedactURL(c.ThirdParty.URL)), slog.Int("batch_size", d.exp.BatchSize()),
		slog.Int("max_in_flight", d.inFlight), slog.Bool("transaction_pooling", c.Stateless))
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

// guarded checks, just before every request to a third party, the locks
// the request's context was derived from (locks.CheckContext): a process
// that wakes from a freeze, past its lease, sends nothing more on behalf of
// a lock a waiting daemon may have taken. The refusal is a *WaitError, which
// the deliverer returns at once, neither retried nor counted by the breaker;
// it wraps locks.ErrLockLost, which the job's result looks at first.
type guarded struct{ delivery.Client }

func (g guarded) Send(ctx context.Context, key string, r *thirdparty.Request, read func(*thirdparty.Answer) (*thirdparty.Result, error)) (*thirdparty.Result, error) {
	if err := locks.CheckContext(ctx); err != nil {
		return nil, &delivery.WaitError{Err: fmt.Errorf("daemon: not sent: %w", err)}
	}
	return g.Client.Send(ctx, key, r, read)
}

// atLeast passes on records at or above min, unless the handler was set up
// for debug. River logs routine counts at info every few seconds; an
// operator reading syncer's info log wants syncer's lines.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	if h.Handler.Enabled(ctx, slog.LevelDebug) {
		return true
	}
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.min}
}

// cappedRetry is River's retry policy for syncer's jobs: exponential with
// jitter, but never more than max. Expected conditions (a busy lock, an open
// breaker, a 429) snooze instead and never get here; what does get here is a
// database or programming error, and River's default (attempt^4 seconds)
// would leave rows waiting for minutes after a database restart.
type cappedRetry struct{ max time.Duration }

func (p cappedRetry) NextRetry(job *rivertype.JobRow) time.Time {
	d := min(time.Duration(1<<min(job.Attempt, 10))*100*time.Millisecond, p.max)
	return time.Now().Add(d/2 + rand.N(d/2+1))
}

// serve starts the HTTP server and returns it with its bound address; with
// HTTPAddrOff it serves nothing and returns a nil server.
func (d *Daemon) serve(ctx context.Context) (*http.Server, string, error) {
	if d.cfg.HTTPAddr == HTTPAddrOff {
		return nil, "", nil
	}
	ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return nil, "", fmt.Errorf("daemon: listen on %s: %w", d.cfg.HTTPAddr, err)
	}
	h := d.handler()
	if d.cfg.Console != nil {
		if err := d.console.set(ctx, d.cfg.Console, d.metrics); err != nil {
			_ = ln.Close()
			return nil, "", fmt.Errorf("daemon: console: %w", err)
		}
		h = withConsole(h, &d.console)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.logger.ErrorContext(ctx, "daemon: http server", slog.String("error", err.Error()))
		}
	}()
	return srv, ln.Addr().String(), nil
}

// handler routes health, readiness, metrics and, if asked, pprof.
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := d.pool.Ping(pctx); err != nil {
			http.Error(w, "database: not answering", http.StatusServiceUnavailable)
			return
		}
		if !d.riverRunning.Load() {
			http.Error(w, "job client: not running", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", d.freshGauges(promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg})))
	if d.cfg.Pprof {
		// No /debug/pprof/cmdline: the command line may hold a token or a
		// database password given as a flag. Index would serve it under
		// its name, so it is refused before Index sees it.
		mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// extraLanes is how many workers the file's tenant sources add to
// --workers: each lane is a job of its own (internal/exporter, lanes.go),
// and a tenant at its account's limit waits inside its lane's job, so a
// source of 16 lanes on 4 workers drained 4 lanes at a time, its tenants
// at a fifth of their accounts' limits (docs/benchmarks.md, "tenants").
// A source counts as one of --workers' sources; its other lanes get a
// worker each.
func extraLanes(file *config.Config) int {
	if file == nil {
		return 0
	}
	n := 0
	for _, s := range file.SourceSpecs() {
		if s.Tenant != "" {
			n += max(s.Lanes, 1) - 1
		}
	}
	return n
}

// poolStat is what the pool's series show of st.
func poolStat(st *pgxpool.Stat) metrics.PoolStat {
	return metrics.PoolStat{Max: st.MaxConns(), InUse: st.AcquiredConns(), Idle: st.IdleConns(),
		Acquires: st.AcquireCount(), Waited: st.EmptyAcquireCount(), WaitTime: st.EmptyAcquireWaitTime(), Opened: st.NewConnsCount()}
}
