package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
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

// Exporter is the sources this daemon exports, seen from the relay: their
// names (jobs.Resources among them when it exports resources), which have
// work, whose lock is held, and their jobs lingering here (Waker).
type Exporter interface {
	Waker
	// Exported names the sources this daemon exports.
	Exported() []string
	// WithWork returns those of names that have work: rows pending, a
	// snapshot or a replay unfinished.
	WithWork(ctx context.Context, q database.Querier, names []string) ([]string, error)
	// Held returns those of names whose export lock a session with a live
	// lease holds.
	Held(ctx context.Context, q database.Querier, names []string) ([]string, error)
}

// Waker is the jobs lingering in this process, seen from the relay: a
// source's job that has drained its table and waits for more.
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
	// Listen is the config of the relay's LISTEN session: a whole session
	// (SYNCER_DIRECT_URL's when the pool goes through a pooler in
	// transaction mode, where LISTEN hears nothing). Defaults to the
	// pool's.
	Listen *pgx.ConnConfig
	// NoListen makes the relay poll the outbox every FastPoll instead of
	// listening (poll.go): no connection may hold session state (a pooler
	// in transaction mode without SYNCER_DIRECT_URL). Listen is unused.
	NoListen bool
	// FastPoll is how often a relay without LISTEN looks for new events.
	// Defaults to FastPollDefault.
	FastPoll time.Duration
	// Fetch, if set, is told the jobs a round inserted or made available,
	// once it committed: this process's River then starts them at once
	// rather than at its next poll (the daemon's fetchDriver).
	Fetch func(ctx context.Context, jobs []*rivertype.JobRow)
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// Stats counts what the relay did.
type Stats struct {
	// Notifications counts the notifications heard, or without LISTEN
	// the polls that found new events.
	Notifications int64
	JobsInserted  int64
	// SourcesWoken counts notifications handed to a source's lingering
	// job instead of a new job.
	SourcesWoken int64
	// JobsRetried counts waiting jobs made available at once because
	// they were overdue (ensureJobs).
	JobsRetried   int64
	EventsRelayed int64
	Connected     bool
}

// Relay turns outbox events into the jobs of their sources.
type Relay struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	exp    Exporter
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

// New returns a relay of exp's sources. river may be an insert-only
// client.
func New(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], exp Exporter, cfg *Config) (*Relay, error) {
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
	if c.FastPoll < 0 {
		return nil, fmt.Errorf("outbox: Config.FastPoll must not be negative, got %s", c.FastPoll)
	}
	c.FastPoll = cmp.Or(c.FastPoll, FastPollDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if exp == nil {
		return nil, errors.New("outbox: the exporter is required")
	}
	return &Relay{pool: pool, river: riverClient, exp: exp, cfg: c, logger: c.Logger}, nil
}

// Run listens and relays until ctx is done. Connection failures are retried
// with backoff and never end Run.
func (r *Relay) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	for {
		var err error
		if r.cfg.NoListen {
			err = r.pollOutbox(ctx, bo)
		} else {
			err = r.listen(ctx, bo)
		}
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
	conn, err := database.Connect(ctx, cmp.Or(r.cfg.Listen, r.pool.Config().ConnConfig))
	if err != nil {
		return fmt.Errorf("outbox: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.cfg.Channel}.Sanitize()); err != nil {
		return fmt.Errorf("outbox: listen: %w", err)
	}
	// Listening: the gate may open for writers. Renewed below while this
	// session listens; it lapses on its own when it stops. A renewal that
	// fails is tried again at the next one: the poll must not wait on it
	// (renewGate).
	r.renewGate(ctx)
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
			r.renewGate(ctx)
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

// Notified handles a notification: the events of each source exported
// here go to its job lingering in this process, or become a job of it.
func (r *Relay) Notified(ctx context.Context) error { return r.round(ctx, false, false) }

// Poll is the fallback for lost notifications and for rows written while no
// daemon was armed: it relays pending events, and makes sure a job will run
// for every source exported here that has work and whose lock nobody
// holds (a holder is working; one whose lease ran out does not count).
func (r *Relay) Poll(ctx context.Context) error { return r.round(ctx, true, false) }

// Kick makes sure a job will run for every source exported here, work or
// not, whoever holds its lock. The daemon calls it at start, because rows
// may have been written while no daemon ran, and a job that finds nothing
// lingers, so the first rows written after the start find it waiting.
func (r *Relay) Kick(ctx context.Context) error { return r.round(ctx, true, true) }

// round relays in one transaction, serialised with every daemon's relay.
// The events name their source (migrations.SourceOp, or none for
// resources); with look, so do the sources with work whose lock no live
// session holds; with force, every source exported here. Each such
// source's job lingering here is
// woken, or else a job of it is inserted unless one waits already. The
// events of the sources exported here are deleted in the same transaction,
// and those of resources when this daemon does not export them, since
// nothing else would (a daemon that exports resources finds their rows by
// its poll); a configured source's events not exported here are left to the
// daemons that export it.
func (r *Relay) round(ctx context.Context, look, force bool) error {
	names := r.exp.Exported()
	here := make(map[string]bool, len(names))
	// The lanes of a source with a tenant column: its events name the
	// source, its jobs each lane.
	lanes := map[string]bool{}
	for _, n := range names {
		here[n] = true
		if src, _, ok := jobs.LaneOf(n); ok {
			lanes[src] = true
		}
	}
	var ready []*rivertype.JobRow
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		// A round never waits for good: see roundLockTimeout. The timeout
		// and the lock in one round trip: a select list is evaluated in
		// order, so the lock waits under the timeout just set.
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)", pgMillis(roundLockTimeout), r.cfg.LockKey); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, op FROM syncer_outbox ORDER BY id LIMIT 10000 FOR UPDATE SKIP LOCKED`)
		if err != nil {
			return err
		}
		var ids []int64
		want := map[string]bool{}
		laned := map[string]bool{} // sources whose lanes the events woke
		var id int64
		var op string
		if _, err := pgx.ForEachRow(rows, []any{&id, &op}, func() error {
			src := jobs.SourceOfOp(op)
			switch {
			case here[src]:
				want[src] = true
			case lanes[src]:
				laned[src] = true
			case src != jobs.Resources:
				return nil
			}
			ids = append(ids, id)
			return nil
		}); err != nil {
			return err
		}
		if err := r.wakeLanes(ctx, tx, names, laned, want); err != nil {
			return err
		}
		switch {
		case force:
			for _, n := range names {
				want[n] = true
			}
		case look && len(names) > 0:
			if err := r.withWork(ctx, tx, names, want); err != nil {
				return err
			}
		}
		// A source whose job lingers here takes the notification (or, on
		// a poll, a nudge to look) instead of a new job: it looks at its
		// table after this round.
		woken := 0
		for n := range want {
			if r.exp.Wake(n) {
				delete(want, n)
				woken++
			}
		}
		inserted, retried, err := r.ensureJobs(ctx, tx, want)
		if err != nil {
			return err
		}
		ready = append(inserted, retried...)
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM syncer_outbox WHERE id = ANY($1)`, ids); err != nil {
				return err
			}
		}
		r.update(func(s *Stats) {
			s.JobsInserted += int64(len(inserted))
			s.EventsRelayed += int64(len(ids))
			s.SourcesWoken += int64(woken)
			s.JobsRetried += int64(len(retried))
		})
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: relay: %w", err)
	}
	if len(ready) > 0 && r.cfg.Fetch != nil {
		r.cfg.Fetch(ctx, ready)
	}
	return nil
}

// laneWaker is an exporter of sources with a tenant column, which says
// which of a source's lanes have work.
type laneWaker interface {
	LanesWithWork(ctx context.Context, q database.Querier, src string) ([]string, error)
}

// wakeLanes adds to want the lanes with work of the sources in laned (an
// event names the source, not its lane), or every lane of them when the
// exporter cannot say.
func (r *Relay) wakeLanes(ctx context.Context, tx pgx.Tx, names []string, laned, want map[string]bool) error {
	for src := range laned {
		if lw, ok := r.exp.(laneWaker); ok {
			work, err := lw.LanesWithWork(ctx, tx, src)
			if err != nil {
				return err
			}
			for _, n := range work {
				want[n] = true
			}
			continue
		}
		for _, n := range names {
			if s, _, ok := jobs.LaneOf(n); ok && s == src {
				want[n] = true
			}
		}
	}
	return nil
}

// withWork adds to want the sources of names with work whose lock no live
// session holds.
//
// A source whose job is active here is left out before its table is
// asked: the job holds its lock (Held would drop the source) or is about
// to take it and look, so the answer changes nothing, and asking it was a
// scan of the pending rows at every poll of every drain, the rows marked
// so far first (issue 55; docs/benchmarks.md, "The relay's look at the
// pending index").
func (r *Relay) withWork(ctx context.Context, tx pgx.Tx, names []string, want map[string]bool) error {
	names = slices.DeleteFunc(slices.Clone(names), r.exp.Active)
	if len(names) == 0 {
		return nil
	}
	work, err := r.exp.WithWork(ctx, tx, names)
	if err != nil || len(work) == 0 {
		return err
	}
	held, err := r.exp.Held(ctx, tx, work)
	if err != nil {
		return err
	}
	work = slices.DeleteFunc(work, func(n string) bool { return slices.Contains(held, n) })
	for _, n := range work {
		want[n] = true
	}
	return nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}
