// Package daemon wires syncer's long-running parts together: the River
// client with the export workers, the outbox relay, periodic gauges, and the
// health, metrics and pprof server. It owns the shutdown order: stop taking
// new batches, let River finish (soft stop, then cancel), then the rest.
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

// Defaults for Config.
const (
	HTTPAddrDefault        = "127.0.0.1:8080"
	ShutdownTimeoutDefault = 30 * time.Second
	WorkersDefault         = 4
	GaugeIntervalDefault   = 5 * time.Second
	RescueStuckJobsDefault = 2 * time.Minute
)

// Config configures the daemon.
type Config struct {
	// ThirdParty configures the HTTP client. URL is required.
	ThirdParty thirdparty.Config
	// Delivery configures rate limiting, retries and the breaker.
	Delivery delivery.Config
	// Exporter configures batches and lingering.
	Exporter exporter.Config
	// HTTPAddr serves /healthz, /readyz and /metrics; empty disables the
	// server. Defaults to HTTPAddrDefault.
	HTTPAddr string
	// Pprof also serves /debug/pprof/ on HTTPAddr. Defaults to false.
	Pprof bool
	// ShutdownTimeout bounds the wait for the batch in flight on shutdown.
	// Defaults to ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// Workers is the number of River workers for syncer's queue. Defaults
	// to WorkersDefault.
	Workers int
	// PollInterval bounds the delay of a lost notification. Defaults to
	// outbox.PollIntervalDefault.
	PollInterval time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Ready, if set, is called with the bound HTTP address once the daemon
	// serves and its River client runs. Tests use it.
	Ready func(addr string)
}

// Run runs the daemon on pool until ctx is cancelled, then shuts down in
// order and returns nil.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg *Config) error {
	c := *cfg
	c.HTTPAddr = cmp.Or(c.HTTPAddr, HTTPAddrDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	logger := c.Logger

	all, err := migrations.All()
	if err != nil {
		return err
	}
	if err := database.CheckMigrated(ctx, pool, all[len(all)-1].Version); err != nil {
		return err
	}
	schema, err := database.CurrentSchema(ctx, pool)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)

	tp, err := thirdparty.New(&c.ThirdParty)
	if err != nil {
		return err
	}
	defer tp.Close()
	// The breaker's state and the credentials fact live in syncer_state, so
	// a daemon that takes the export lock over inherits them.
	shared, err := breakerstore.New(pool, &breakerstore.Config{Schema: schema})
	if err != nil {
		return err
	}
	installation, err := checkpoint.Installation(ctx, pool)
	if err != nil {
		return err
	}
	dcfg := c.Delivery
	dcfg.Logger, dcfg.Metrics, dcfg.Installation = logger, m, installation
	dcfg.MaxInFlight = cmp.Or(dcfg.MaxInFlight, c.Exporter.MaxInFlight)
	deliverer, err := delivery.New(tp, breakerstore.NewShared(shared, 0), &dcfg)
	if err != nil {
		return err
	}
	locker, err := locks.New(pool.Config().ConnConfig, &locks.Config{Logger: logger})
	if err != nil {
		return err
	}
	ecfg := c.Exporter
	ecfg.Logger, ecfg.Metrics, ecfg.Schema, ecfg.Installation = logger, m, schema, installation
	exp, err := exporter.New(pool, locker, deliverer, &ecfg)
	if err != nil {
		return err
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, exp.SyncWorker())
	river.AddWorker(workers, exp.ReplayWorker())
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:               schema,
		Queues:               map[string]river.QueueConfig{jobs.Queue: {MaxWorkers: c.Workers}},
		Workers:              workers,
		FetchCooldown:        10 * time.Millisecond,
		FetchPollInterval:    200 * time.Millisecond,
		RescueStuckJobsAfter: RescueStuckJobsDefault,
		MaxAttempts:          1000,
		RetryPolicy:          cappedRetry{max: 30 * time.Second},
		Logger:               slog.New(atLeast{logger.Handler(), slog.LevelWarn}).With(slog.String("component", "river")),
	})
	if err != nil {
		return fmt.Errorf("daemon: river client: %w", err)
	}

	var relayConnected atomic.Bool
	relay, err := outbox.New(pool, riverClient, exp, &outbox.Config{
		Channel:      migrations.Channel(schema),
		LockKey:      locks.Key(exporter.LockNamespace, "relay:"+schema),
		PollInterval: c.PollInterval,
		LockHeld: func(ctx context.Context) (bool, error) {
			_, held, err := locker.Holder(ctx, pool, exp.LockKey())
			return held, err
		},
		Logger:  logger,
		OnStats: func(s outbox.Stats) { relayConnected.Store(s.Connected) },
	})
	if err != nil {
		return err
	}

	var riverRunning atomic.Bool
	srv, addr, err := serve(ctx, &c, reg, pool, &riverRunning)
	if err != nil {
		return err
	}

	runCtx, stopAux := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAux()
	if err := riverClient.Start(runCtx); err != nil {
		return fmt.Errorf("daemon: start river: %w", err)
	}
	riverRunning.Store(true)

	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(runCtx) })
	wg.Go(func() { gauges(runCtx, pool, m, logger) })
	if err := relay.Kick(ctx); err != nil {
		logger.WarnContext(ctx, "daemon: initial sync kick failed; the relay's poll will retry", slog.String("error", err.Error()))
	}
	logger.InfoContext(ctx, "daemon: running", slog.String("schema", schema), slog.String("http_addr", addr),
		slog.String("thirdparty", thirdparty.RedactURL(c.ThirdParty.URL)), slog.Int("batch_size", exp.BatchSize()))
	if c.Ready != nil {
		c.Ready(addr)
	}

	<-ctx.Done()
	logger.InfoContext(ctx, "daemon: shutting down", slog.Duration("timeout", c.ShutdownTimeout))
	exp.Shutdown()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownTimeout)
	err = riverClient.Stop(stopCtx)
	cancel()
	if err != nil {
		logger.WarnContext(ctx, "daemon: batch in flight did not finish in time; cancelling it (it is recorded and will be resent)")
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = riverClient.StopAndCancel(cctx)
		cancel()
	}
	riverRunning.Store(false)
	stopAux()
	wg.Wait()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	logger.InfoContext(ctx, "daemon: stopped")
	return nil
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

// serve starts the HTTP server and returns it with its bound address.
func serve(ctx context.Context, c *Config, reg *prometheus.Registry, pool *pgxpool.Pool, riverRunning *atomic.Bool) (*http.Server, string, error) {
	if c.HTTPAddr == "off" {
		return nil, "", nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(pctx); err != nil {
			http.Error(w, "database: not answering", http.StatusServiceUnavailable)
			return
		}
		if !riverRunning.Load() {
			http.Error(w, "job client: not running", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if c.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		return nil, "", fmt.Errorf("daemon: listen on %s: %w", c.HTTPAddr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.Logger.ErrorContext(ctx, "daemon: http server", slog.String("error", err.Error()))
		}
	}()
	return srv, ln.Addr().String(), nil
}

// gauges refreshes the table-wide gauges. They come from the database, not
// from this process, so every daemon reports the same truth.
func gauges(ctx context.Context, pool *pgxpool.Pool, m *metrics.Metrics, logger *slog.Logger) {
	t := time.NewTicker(GaugeIntervalDefault)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, GaugeIntervalDefault)
		if err := refreshGauges(qctx, pool, m); err != nil && ctx.Err() == nil {
			logger.DebugContext(ctx, "daemon: refresh gauges", slog.String("error", err.Error()))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func refreshGauges(ctx context.Context, pool *pgxpool.Pool, m *metrics.Metrics) error {
	c, err := resources.CountAll(ctx, pool)
	if err != nil {
		return err
	}
	m.UnsyncedRows.Set(float64(c.Unsynced))
	m.OldestUnsyncedAge.Set(c.OldestUnsyncedAge.Seconds())
	n, err := outbox.Pending(ctx, pool)
	if err != nil {
		return err
	}
	m.OutboxPending.Set(float64(n))
	// The breaker is shared: a standby daemon reports the state the lock
	// holder left, not only what it saw itself.
	var raw []byte
	err = pool.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1`, status.KeyBreaker).Scan(&raw)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if raw != nil {
		state, _ := status.BreakerState(raw, time.Now())
		m.SetBreakerState(state)
	}
	rows, err := pool.Query(ctx, `SELECT kind, state::text, count(*) FROM river_job
		WHERE kind = ANY($1) GROUP BY kind, state`, []string{jobs.SyncArgs{}.Kind(), jobs.ReplayArgs{}.Kind()})
	if err != nil {
		return err
	}
	var kind, state string
	var count int64
	m.RiverJobs.Reset()
	_, err = pgx.ForEachRow(rows, []any{&kind, &state, &count}, func() error {
		m.RiverJobs.WithLabelValues(kind, state).Set(float64(count))
		return nil
	})
	return err
}
