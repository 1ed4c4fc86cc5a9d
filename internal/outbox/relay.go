package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
)

// Defaults for Config.
const (
	PollIntervalDefault = 2 * time.Second
	LeaseTTLDefault     = 30 * time.Second
)

// probePayload marks the notification a relay sends itself to prove LISTEN
// works; probeTimeout is how long it may take.
const (
	probePayload = "syncer-probe"
	probeTimeout = 10 * time.Second
)

// Waker is the jobs lingering in this process, seen from the relay: a
// feed's job that has drained its table and waits for more. src names the
// feed as Wake does: "" for resources, else a configured source.
type Waker interface {
	// Wake passes a notification to the job of src lingering in this
	// process and reports whether one took it: then it looks at its table
	// again, and no job need be inserted.
	Wake(src string) bool
	// Active reports whether a job of src lingers in this process.
	Active(src string) bool
}

// Config configures a Relay.
type Config struct {
	// Channel is the channel the outbox trigger notifies. Required.
	Channel string
	// LockKey is the transaction-level advisory lock that serialises the
	// relays of all daemons of one installation. Required.
	LockKey int64
	// PollInterval bounds the delay a lost notification can cause. Defaults
	// to PollIntervalDefault.
	PollInterval time.Duration
	// LeaseTTL is how long the gate stays open after the relay last renewed
	// its lease; the relay renews it every third of that while it listens.
	// Defaults to LeaseTTLDefault.
	LeaseTTL time.Duration
	// LockHeld reports whether some session holds the export lock; the poll
	// fallback enqueues no job while one does, since the holder is working.
	// Optional.
	LockHeld func(ctx context.Context) (bool, error)
	// Sources are the names of the configured sources this daemon exports
	// (SYNCER_CONFIG): their events become jobs.SourceArgs jobs, one
	// waiting per source. Events of other sources are left to the daemons
	// that export them. Defaults to none.
	Sources []string
	// NoResources says the daemon exports no resources (SYNCER_CONFIG
	// without a resources' destination): the relay enqueues no sync or
	// replay job, and deletes the resources' events, since no job of this
	// daemon will. Defaults to false.
	NoResources bool
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// Stats counts what the relay did.
type Stats struct {
	Notifications int64
	JobsInserted  int64
	// SourcesWoken counts notifications handed to a source's lingering
	// job instead of a new job.
	SourcesWoken  int64
	EventsRelayed int64
	Connected     bool
}

// Relay turns outbox events into sync jobs.
type Relay struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	waker  Waker
	cfg    Config
	logger *slog.Logger

	mu    sync.Mutex
	stats Stats
}

// update changes the counters.
func (r *Relay) update(f func(*Stats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.stats)
}

// New returns a relay. river may be an insert-only client.
func New(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], waker Waker, cfg *Config) (*Relay, error) {
	if cfg == nil || cfg.Channel == "" {
		return nil, errors.New("outbox: Config.Channel is required")
	}
	if cfg.LockKey == 0 {
		return nil, errors.New("outbox: Config.LockKey is required")
	}
	c := *cfg
	if c.PollInterval < 0 {
		return nil, fmt.Errorf("outbox: Config.PollInterval must not be negative, got %s", c.PollInterval)
	}
	if c.LeaseTTL < 0 {
		return nil, fmt.Errorf("outbox: Config.LeaseTTL must not be negative, got %s", c.LeaseTTL)
	}
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Relay{pool: pool, river: riverClient, waker: waker, cfg: c, logger: c.Logger}, nil
}

// Run listens and relays until ctx is done. Connection failures are retried
// with backoff and never end Run.
func (r *Relay) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	for {
		err := r.listen(ctx, bo)
		if ctx.Err() != nil {
			return nil
		}
		r.setConnected(false)
		wait := bo.NextBackOff()
		r.logger.WarnContext(ctx, "outbox: listener lost its connection; reconnecting",
			slog.String("error", err.Error()), slog.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (r *Relay) setConnected(ok bool) { r.update(func(s *Stats) { s.Connected = ok }) }

func (r *Relay) listen(ctx context.Context, bo backoff.BackOff) error {
	conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("outbox: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.cfg.Channel}.Sanitize()); err != nil {
		return fmt.Errorf("outbox: listen: %w", err)
	}
	// Listening: the gate may open for writers. Renewed below while this
	// session listens; it lapses on its own when it stops.
	if err := RenewLease(ctx, r.pool, r.cfg.LeaseTTL); err != nil {
		return err
	}
	renewed := time.Now()
	bo.Reset()
	r.setConnected(true)
	r.logger.DebugContext(ctx, "outbox: listening", slog.String("channel", r.cfg.Channel))

	// A probe proves that notifications reach this session. Behind a
	// transaction-mode pooler (PgBouncer's pool_mode=transaction) LISTEN
	// silently hears nothing; the poll still exports, but seconds late.
	probeSent := time.Now()
	probeHeard, probeWarned := false, false
	if _, err := r.pool.Exec(ctx, "SELECT pg_notify($1, $2)", r.cfg.Channel, probePayload); err != nil {
		return fmt.Errorf("outbox: probe: %w", err)
	}

	// Whatever happened while we were not listening is found by a poll.
	if err := r.Poll(ctx); err != nil && ctx.Err() == nil {
		r.logger.WarnContext(ctx, "outbox: poll failed", slog.String("error", err.Error()))
	}
	for {
		if !probeHeard && !probeWarned && time.Since(probeSent) > probeTimeout {
			probeWarned = true
			r.logger.ErrorContext(ctx, "outbox: LISTEN hears no notifications: is the database behind a connection pooler in transaction mode? "+
				"Point syncer at PostgreSQL directly or at a session-mode pool; until then exports wait for the poll",
				slog.String("channel", r.cfg.Channel), slog.Duration("poll_interval", r.cfg.PollInterval))
		}
		// A session that hears nothing (a transaction-mode pooler) must not
		// keep writers notifying.
		if (probeHeard || time.Since(probeSent) < probeTimeout) && time.Since(renewed) >= r.cfg.LeaseTTL/3 {
			if err := RenewLease(ctx, r.pool, r.cfg.LeaseTTL); err != nil {
				return err
			}
			renewed = time.Now()
		}
		wctx, cancel := context.WithTimeout(ctx, min(r.cfg.PollInterval, r.cfg.LeaseTTL/3))
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && n.Payload == probePayload:
			probeHeard = true
		case err == nil:
			r.update(func(s *Stats) { s.Notifications++ })
			// Several notifications may be queued; one relay round covers
			// them all.
			if err := r.Notified(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: relay failed", slog.String("error", err.Error()))
			}
		case errors.Is(err, context.DeadlineExceeded):
			if err := r.Poll(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: poll failed", slog.String("error", err.Error()))
			}
		default:
			return fmt.Errorf("outbox: wait: %w", err)
		}
	}
}

// Notified handles a notification: a sync job running here takes it, or the
// pending events become a sync job.
func (r *Relay) Notified(ctx context.Context) error {
	if err := r.relaySources(ctx, false); err != nil {
		return err
	}
	if r.cfg.NoResources {
		return Consume(ctx, r.pool)
	}
	if r.waker != nil && r.waker.Wake("") {
		return nil
	}
	_, err := r.relay(ctx, false, false)
	return err
}

// Poll is the fallback for lost notifications and for rows written while no
// daemon was armed: it relays pending events, and enqueues a sync job when
// pending rows exist and nobody is exporting. A sync job running here polls
// for itself, so Poll leaves it alone.
func (r *Relay) Poll(ctx context.Context) error {
	if err := r.relaySources(ctx, true); err != nil {
		return err
	}
	if r.cfg.NoResources {
		return Consume(ctx, r.pool)
	}
	if r.waker != nil && r.waker.Active("") {
		return nil
	}
	n, err := r.relay(ctx, false, false)
	if err != nil || n > 0 {
		return err
	}
	held := false
	if r.cfg.LockHeld != nil {
		if held, err = r.cfg.LockHeld(ctx); err != nil {
			return err
		}
	}
	if err := r.reviveReplays(ctx, held); err != nil {
		return err
	}
	if held {
		return nil
	}
	pending, err := resources.AnyPending(ctx, r.pool)
	if err != nil || !pending {
		return err
	}
	// Nobody holds the lock, yet rows are pending: any running sync job is
	// ending or belongs to a dead process.
	_, err = r.relay(ctx, true, true)
	return err
}

// reviveReplays gives every unfinished replay a job that will run: one
// whose job was left running by a killed daemon would otherwise wait
// forever, since River never rescues a job without a timeout (the workers
// disable theirs). A running replay job while nobody holds the export lock
// is dead or between two chunks, however many there are: two daemons
// killed mid-replay leave two, and counting them as alive stalled the
// replay and, the live sync yielding to it, every row (the upgrade test of
// internal/e2e). A second job is harmless (the lock and the replay's
// checkpoint serialise them), and one waiting job is enough.
func (r *Relay) reviveReplays(ctx context.Context, lockHeld bool) error {
	// Most polls find no replay: answer that without a transaction or the
	// relay lock, which every daemon's poll would otherwise queue on.
	if waiting, err := replays.AnyWaiting(ctx, r.pool); err != nil || !waiting {
		return err
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", r.cfg.LockKey); err != nil {
			return err
		}
		ids, err := replays.Unfinished(ctx, tx)
		if err != nil || len(ids) == 0 {
			return err
		}
		states := append([]rivertype.JobState{rivertype.JobStateRunning}, waitingStates...)
		res, err := r.river.JobListTx(ctx, tx, river.NewJobListParams().
			Kinds(jobs.ReplayArgs{}.Kind()).States(states...).First(1000))
		if err != nil {
			return fmt.Errorf("list replay jobs: %w", err)
		}
		waiting, running := map[int64]bool{}, map[int64]int{}
		for _, j := range res.Jobs {
			var args jobs.ReplayArgs
			if json.Unmarshal(j.EncodedArgs, &args) != nil {
				continue
			}
			if j.State == rivertype.JobStateRunning {
				running[args.ReplayID]++
			} else {
				waiting[args.ReplayID] = true
			}
		}
		for _, id := range ids {
			if waiting[id] || (running[id] > 0 && lockHeld) {
				continue
			}
			if _, err := r.river.InsertTx(ctx, tx, jobs.ReplayArgs{ReplayID: id}, nil); err != nil {
				return fmt.Errorf("insert replay job: %w", err)
			}
			r.logger.InfoContext(ctx, "outbox: replay had no job that will run; enqueued one", slog.Int64("replay_id", id))
		}
		return nil
	})
}

// Kick makes sure a sync job is pending, events or not. The daemon calls it
// at start, because rows may have been written while no daemon ran, and a
// sync job left running by a killed daemon will never finish.
func (r *Relay) Kick(ctx context.Context) error {
	if err := r.relaySources(ctx, true); err != nil {
		return err
	}
	if r.cfg.NoResources {
		return nil
	}
	if _, err := r.relay(ctx, true, true); err != nil {
		return err
	}
	held := false
	if r.cfg.LockHeld != nil {
		var err error
		if held, err = r.cfg.LockHeld(ctx); err != nil {
			return err
		}
	}
	return r.reviveReplays(ctx, held)
}

// relay runs one round in one transaction and returns how many events it
// relayed. force enqueues a job even without events; ignoreRunning does so
// whatever sync jobs are running.
func (r *Relay) relay(ctx context.Context, force, ignoreRunning bool) (int, error) {
	var relayed int
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", r.cfg.LockKey); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id FROM syncer_outbox WHERE op NOT LIKE $1 ORDER BY id LIMIT 10000 FOR UPDATE SKIP LOCKED`, sourceOps)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if len(ids) == 0 && !force {
			return nil
		}
		inserted, err := r.ensureJob(ctx, tx, ignoreRunning)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM syncer_outbox WHERE id = ANY($1)`, ids); err != nil {
				return err
			}
		}
		relayed = len(ids)
		r.update(func(s *Stats) {
			if inserted {
				s.JobsInserted++
			}
			s.EventsRelayed += int64(len(ids))
		})
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: relay: %w", err)
	}
	return relayed, nil
}

// waitingStates are the states of a job that has not started yet and so is
// sure to look at the table after this transaction commits.
var waitingStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending,
	rivertype.JobStateScheduled, rivertype.JobStateRetryable,
}

// ensureJob makes sure a sync job will look at the table after tx commits.
// A waiting job will. A running one may be about to end (or belong to a dead
// process), so it does not count: that is the trap of River's own
// uniqueness. But a job that is trying the lock is running for a moment too,
// so a second running job is taken as a sign that the work is covered, or
// jobs would pile up while one holds the lock; the poll's ignoreRunning
// round covers what that leaves.
func (r *Relay) ensureJob(ctx context.Context, tx pgx.Tx, ignoreRunning bool) (bool, error) {
	states := append([]rivertype.JobState{rivertype.JobStateRunning}, waitingStates...)
	res, err := r.river.JobListTx(ctx, tx, river.NewJobListParams().
		Kinds(jobs.SyncArgs{}.Kind()).States(states...).First(10))
	if err != nil {
		return false, fmt.Errorf("list sync jobs: %w", err)
	}
	running := 0
	for _, j := range res.Jobs {
		if j.State != rivertype.JobStateRunning {
			return false, nil
		}
		running++
	}
	if running >= 2 && !ignoreRunning {
		return false, nil
	}
	if _, err := r.river.InsertTx(ctx, tx, jobs.SyncArgs{}, nil); err != nil {
		return false, fmt.Errorf("insert sync job: %w", err)
	}
	return true, nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}
