package daemon

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/presence"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/verify"
	"github.com/syncer-dev/syncer/migrations"
)

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
	driver := newFetchDriver(d.pool)
	d.river, err = river.NewClient(driver, &river.Config{
		Schema:        d.schema,
		Queues:        map[string]river.QueueConfig{jobs.Queue: {MaxWorkers: slots}},
		Workers:       workers,
		FetchCooldown: 10 * time.Millisecond,
		// The poll starts a job inserted by another daemon's relay (this
		// one's starts at once: fetchDriver), and a job that snoozed at
		// its MaxRun (30 s) while rows flow: its rows wait for it. 500 ms
		// put the latency's p99 at 210-280 ms against 55 (issue 57,
		// docs/benchmarks.md, "An idle daemon's share"), so it stays at
		// 200 ms, 5 of an idle daemon's 11 statements a second.
		FetchPollInterval:    cmp.Or(c.fetchPoll, FetchPollInterval),
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
		Fetch:        driver.Fetch,
		Logger:       logger,
	})
	return err
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
