package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/locks"
)

// Background verification (a destination's verify_every): the daemons
// verify every source of such a destination once a period, one daemon at
// a time per source, and run what "Verify now" asks for.
//
//   - One loop per daemon looks, every BackgroundConfig.Tick, at every
//     source's last run (one statement) and starts those that are due: a
//     period after the last run began, when someone asked, or when a
//     background run was interrupted (it resumes from syncer_verify_runs).
//   - A source's run holds an advisory lock (VerifyKey) for its length:
//     the daemon that takes it runs it, the others see it busy and skip.
//     A run is a goroutine while it lasts, none otherwise.
//   - A periodic run spreads its pages over half its period (the table's
//     estimated rows over LookupSize ids a page; with tenants, each
//     tenant's pages, as each is paged apart), so 10 million rows are
//     about 28 lookups a minute over 12 hours, not a burst. Each lookup
//     waits the time left over the lookups left; past the estimate (rows
//     added) the run quickens a step at a time and still ends within its
//     period (spread.go). It still takes its requests from the
//     destination's shared limiter (Job.Turn) and at most PendingShare of
//     them while rows are pending: a spread only slows the lookups.

// Job is one source a daemon may verify in the background.
type Job struct {
	Source Source
	Reader Reader
	// Destination is the source's destination, for logs and metrics.
	Destination string
	// Every is the destination's verify_every; 0 runs only on request.
	Every time.Duration
	// Heal is the destination's verify_heal.
	Heal bool
	// Limit and Burst are the destination's rate limit (0: none) and burst.
	Limit float64
	Burst int
	// Namespace is the destination's breakerstore namespace.
	Namespace string
	// Turn takes one of the destination's requests (its deliverer's
	// Turn); nil takes none.
	Turn func(context.Context) error
	// Tenants, set instead of Reader, verifies the source a tenant at a
	// time, each against its own account (background_tenants.go).
	Tenants Tenants
	// Unreadable, set when Reader and Tenants are nil, says why the destination cannot
	// be read back: a run asked for is then recorded failed with it,
	// rather than left asked for.
	Unreadable string
}

// Background defaults.
const (
	// TickDefault is how often the loop looks for runs due.
	TickDefault = 10 * time.Second
	// RetryFailedDefault is how long after a failed run it is tried
	// again, when the period is longer.
	RetryFailedDefault = 15 * time.Minute
)

// BackgroundConfig configures a Background.
type BackgroundConfig struct {
	// Schema is syncer's schema, which the lock keys name.
	Schema string
	// Jobs returns the sources to verify now (asked at every tick, so a
	// reload's are seen). Required.
	Jobs func(ctx context.Context) ([]Job, error)
	// Tick is how often due runs are looked for. Defaults to TickDefault.
	Tick time.Duration
	// LookupSize is the ids of one lookup. Defaults to LookupSizeDefault.
	LookupSize int
	// Ended is called after each run with its result and error (metrics);
	// nil calls nothing.
	Ended func(j *Job, res *Result, err error)
	// Logger logs runs. Defaults to a logger that discards.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Background runs background verification for one daemon.
type Background struct {
	db     database.DB
	locker *locks.Locker
	cfg    BackgroundConfig

	mu sync.Mutex
	// running holds, by source, the hurry of the run this daemon has under
	// way (Pace.Hurry).
	running map[string]context.CancelFunc
	wg      sync.WaitGroup
}

// NewBackground returns the loop; Run runs it.
func NewBackground(db database.DB, locker *locks.Locker, cfg *BackgroundConfig) (*Background, error) {
	c := *cfg
	if c.Jobs == nil {
		return nil, errors.New("verify: BackgroundConfig.Jobs is required")
	}
	c.Tick = cmp.Or(c.Tick, TickDefault)
	c.LookupSize = lookupSize(c.LookupSize)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Background{db: db, locker: locker, cfg: c, running: map[string]context.CancelFunc{}}, nil
}

// VerifyKey is the advisory lock a source's background run holds.
func VerifyKey(schema, source string) int64 {
	return locks.Key(locks.Namespace, "verify:"+schema+":"+source)
}

// Run looks for due runs every tick until ctx ends, then waits for the
// runs it started: each stops after its page, its progress saved, and is
// recorded as interrupted (the next daemon resumes it).
func (b *Background) Run(ctx context.Context) {
	defer b.wg.Wait()
	t := time.NewTicker(b.cfg.Tick)
	defer t.Stop()
	for {
		b.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick starts the runs due now.
func (b *Background) Tick(ctx context.Context) {
	jobs, err := b.cfg.Jobs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.cfg.Logger.WarnContext(ctx, "verify: background: sources", slog.String("error", err.Error()))
		}
		return
	}
	if len(jobs) == 0 || ctx.Err() != nil {
		return
	}
	last, err := LastRuns(ctx, b.db)
	if err != nil {
		if ctx.Err() == nil {
			b.cfg.Logger.WarnContext(ctx, "verify: background: read last runs", slog.String("error", err.Error()))
		}
		return
	}
	now := b.cfg.Now()
	for i := range jobs {
		j := jobs[i]
		name := j.Source.Name()
		l := last[name]
		if j.Reader == nil && j.Tenants == nil {
			if l != nil && l.Requested() {
				if err := refused(ctx, b.db, name, j.Unreadable); err != nil {
					b.cfg.Logger.WarnContext(ctx, "verify: background: refuse a run", slog.String("source", name), slog.String("error", err.Error()))
				}
			}
			continue
		}
		if !due(&j, l, now) {
			continue
		}
		b.mu.Lock()
		hurry, busy := b.running[name]
		b.mu.Unlock()
		if busy {
			// Asked for while this daemon's run is under way: the run
			// stops spreading its lookups, so that it ends, and the one
			// asked for starts, within ticks rather than half a period.
			if l != nil && l.Requested() {
				hurry()
			}
			continue
		}
		lk, err := b.locker.TryAcquire(ctx, VerifyKey(b.cfg.Schema, name))
		if errors.Is(err, locks.ErrLockBusy) {
			continue
		}
		if err != nil {
			b.cfg.Logger.WarnContext(ctx, "verify: background: lock", slog.String("source", name), slog.String("error", err.Error()))
			continue
		}
		hctx, hurry := context.WithCancel(context.Background())
		b.mu.Lock()
		b.running[name] = hurry
		b.mu.Unlock()
		requested := l != nil && l.Requested()
		b.wg.Go(func() {
			defer func() {
				_ = lk.Release(ctx)
				b.mu.Lock()
				delete(b.running, name)
				b.mu.Unlock()
				hurry()
			}()
			b.run(ctx, lk, &j, requested, hctx)
		})
	}
}

// due reports whether j's source is to be verified now, given its last run.
func due(j *Job, l *Last, now time.Time) bool {
	if l == nil {
		return j.Every > 0
	}
	if l.Requested() {
		return true
	}
	// A run of the daemons that stopped half way goes on; one of the
	// command line is the command's to resume.
	if (l.State == StateRunning || l.State == StateInterrupted) && l.By != ByCommand {
		return true
	}
	if j.Every <= 0 {
		return false
	}
	if l.StartedAt == nil {
		return true
	}
	wait := j.Every
	if l.State == StateFailed {
		wait = min(wait, RetryFailedDefault)
	}
	return !now.Before(l.StartedAt.Add(wait))
}

// run verifies j's source under lk; a periodic run stops spreading its
// lookups once hurry is done.
func (b *Background) run(ctx context.Context, lk *locks.Lock, j *Job, requested bool, hurry context.Context) {
	name := j.Source.Name()
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	pace := NewPace(j.Limit, j.Burst).Shared(j.Namespace).Turn(j.Turn)
	by := ByBackground
	if requested {
		by = ByConsole
	} else if j.Every > 0 {
		if pages, err := b.pages(lctx, j); err != nil {
			b.cfg.Logger.WarnContext(ctx, "verify: background: rows not estimated; pages go at the destination's pace",
				slog.String("source", name), slog.String("error", err.Error()))
		} else {
			pace.Spread(pages, j.Every/2, j.Every).Hurry(hurry)
		}
	}
	log := b.cfg.Logger.With(slog.String("source", name), slog.String("destination", j.Destination))
	log.InfoContext(ctx, "verify: background run started", slog.String("by", by), slog.Bool("heal", j.Heal))
	rc := &Config{LookupSize: b.cfg.LookupSize, Heal: j.Heal, Pace: pace, By: by, Logger: b.cfg.Logger}
	var res *Result
	var err error
	if j.Tenants != nil {
		res, err = b.runTenants(lctx, j, rc)
	} else {
		res, err = Run(lctx, b.db, j.Source, j.Reader, rc)
	}
	if b.cfg.Ended != nil {
		b.cfg.Ended(j, res, err)
	}
	switch {
	case errors.Is(err, ErrInterrupted):
		log.InfoContext(ctx, "verify: background run interrupted; the next daemon resumes it")
	case err != nil:
		log.WarnContext(ctx, "verify: background run failed; tried again later", slog.String("error", err.Error()))
	case res.Drifted() > 0:
		log.WarnContext(ctx, "verify: drift found", slog.Int64("checked", res.Checked), slog.Int64("missing", res.Missing),
			slog.Int64("stale", res.Stale), slog.Int64("zombie", res.Zombie), slog.Int64("healed", res.Healed))
	default:
		log.InfoContext(ctx, "verify: nothing drifted", slog.Int64("checked", res.Checked), slog.Int64("unknown", res.Unknown),
			slog.Int64("pending", res.Pending))
	}
}

// pages is about how many lookups a periodic run of j's source makes:
// the pages its tenants' rows make, each tenant's paged apart
// (TenantPager), or its rows over a page. The run spreads them over half
// its period.
func (b *Background) pages(ctx context.Context, j *Job) (int64, error) {
	if tp, ok := j.Tenants.(TenantPager); ok {
		return tp.Pages(ctx, b.db, b.cfg.LookupSize)
	}
	sz, ok := j.Source.(Sizer)
	if !ok {
		return 0, fmt.Errorf("source %s cannot estimate its rows", j.Source.Name())
	}
	rows, err := sz.Estimate(ctx, b.db)
	if err != nil {
		return 0, err
	}
	return rows/int64(b.cfg.LookupSize) + 1, nil
}

// ErrBackgroundRunning is returned by CheckIdle while a daemon verifies
// the source: two runs of one source would share its saved progress.
var ErrBackgroundRunning = errors.New("a daemon is verifying this source now (syncer status shows it); run this again once it finished")

// CheckIdle returns ErrBackgroundRunning, wrapped, while a daemon holds
// source's verify lock in schema.
func CheckIdle(ctx context.Context, q database.Querier, schema, source string) error {
	held, err := locks.HeldLive(ctx, q, VerifyKey(schema, source))
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if held {
		return fmt.Errorf("verify: source %s: %w", source, ErrBackgroundRunning)
	}
	return nil
}
