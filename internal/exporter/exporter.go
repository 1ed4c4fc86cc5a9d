// Package exporter is the only code that pushes rows to the third party. It
// runs as River jobs of one kind (jobs.ExportArgs), one per source:
// resources and every configured source alike, each with its replays.
//
// Guarantees, each resting on one mechanism:
//   - One pusher per source at a time, across all daemons: every push happens
//     under the source's export advisory lock, taken with a non-blocking try. A job that
//     finds it busy snoozes, so no worker slot ever sleeps on the lock.
//   - A lost lock marks nothing: marks, failures and checkpoints are written
//     in a transaction on the connection that holds the lock, and the push in
//     flight is cancelled the moment the lock is known lost.
//   - Exactly the pushed versions are marked: a row updated while its batch
//     was in flight stays pending and goes again, at its new version.
//   - No high-water mark decides what is pending: every pass scans the
//     pending index from the start, so a row whose id committed late is found.
//   - The same batch after a crash: the batch about to be pushed is recorded
//     (in the checkpoint, in the transaction that marks the previous one)
//     before its push, and the next holder of the lock pushes it first, with
//     the same Idempotency-Key.
//   - Latency without a job per insert: a job that has drained its feed
//     (resources' live sync, or a configured source's) keeps its lock for a
//     while and polls (gate shut) or waits for a notification the relay
//     hands it (gate open), so a new row needs no River round trip; see
//     linger.go.
//
// Two jobs, kept apart. Scheduling decides when and where a batch runs:
// the River worker and a job's lock (worker.go), its turn at its
// destination (turns.go), lingering (linger.go, wakers.go, gate.go), the
// lanes' share between daemons (share.go) and reloads (reload.go); its
// state is in types of their own, never behind a lock of the Exporter.
// A pipeline (pipeline.go) runs a batch through its stages, each a type
// that takes only what it uses and has its own tests: read (reader),
// unchanged (bodies), deliver (pusher), mark (marker), the rows' story
// (story) and held keys (internal/exporter/heldkeys); target.pipeline
// builds them.
package exporter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/exporter/heldkeys"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// Defaults for Config.
const (
	LockBusySnoozeDefault     = 250 * time.Millisecond
	HotPollDefault            = 5 * time.Millisecond
	HotLingerDefault          = 500 * time.Millisecond
	ColdLingerDefault         = 5 * time.Second
	MaxRunDefault             = 30 * time.Second
	ReplayChunkBatchesDefault = 20
	MarkTimeoutDefault        = 30 * time.Second
	ReplayShareDefault        = 0.25
	MaxSnoozeDefault          = 10 * time.Second
	PassLengthDefault         = 2 * time.Second
	MaxLingeringDefault       = 2
	AbandonAfterDefault       = 3 * time.Second
)

// HotPollMax is the longest HotPoll a setting may ask for: well under
// HotLingerDefault, or a job would stop lingering between two looks.
const HotPollMax = HotLingerDefault / 5

// Config configures an Exporter.
type Config struct {
	// BatchSize is the most items a batch of any feed holds, unless a
	// source sets its own. Defaults to feed.ItemsDefault.
	BatchSize int
	// BatchMaxBytes is the most payload bytes a batch holds. Defaults to
	// feed.BytesDefault.
	BatchMaxBytes int
	// LockBusySnooze is how long a job snoozes when another session holds the
	// export lock. Defaults to LockBusySnoozeDefault.
	LockBusySnooze time.Duration
	// HotPoll is how often a job that has drained its feed looks again
	// while writes are flowing: HotPoll after its last look started (at
	// once if that look's pass took longer), and HotPoll after a look that
	// found nothing. Defaults to HotPollDefault.
	HotPoll time.Duration
	// HotLinger is how long a job keeps polling after it last found a
	// row, before it opens the gate and waits for notifications. Defaults to
	// HotLingerDefault.
	HotLinger time.Duration
	// ColdLinger is how long a job keeps its lock waiting for a
	// notification before it ends. Defaults to ColdLingerDefault.
	ColdLinger time.Duration
	// MaxRun bounds one execution of a job; a job with work left snoozes for
	// zero and runs again, so River's stuck-job rescue stays meaningful.
	// Defaults to MaxRunDefault.
	MaxRun time.Duration
	// Schema is the schema of the resources table, which names the export
	// lock. Required.
	Schema string
	// ReplayChunkBatches is how many batches of a replay of resources go
	// between two turns of live rows. Defaults to
	// ReplayChunkBatchesDefault.
	ReplayChunkBatches int
	// MaxItemBytes is the largest payload sent, of every feed; a larger
	// item is recorded failed with the reason, never read whole. Defaults
	// to feed.MaxItemBytesDefault.
	MaxItemBytes int
	// ReplayShare is the least share of the batches a replay gets while
	// live rows keep arriving, from 0 (exclusive) to 1. Defaults to
	// ReplayShareDefault.
	ReplayShare float64
	// MaxSnooze bounds how long a job waiting for the third party (a 429
	// pause, an open breaker) is parked: it runs again and reads the shared
	// pause anew, so a restart or a shortened pause is seen. Defaults to
	// MaxSnoozeDefault.
	MaxSnooze time.Duration
	// PassLength bounds one pass of the live sync, so a job whose source
	// refills faster than the third party takes it still checks for
	// its replays and its run limit. Defaults to PassLengthDefault.
	PassLength time.Duration
	// MaxLingering is the most sources' jobs that linger at once in this
	// process (linger.go), each holding a River worker slot: one more
	// drains and ends, so other sources still find a slot. The daemon sets
	// it below its worker count. Defaults to MaxLingeringDefault.
	MaxLingering int
	// AbandonAfter is how long a job asked to stop (its source or its
	// destination changed in a reload, or the shutdown cancelled it) may
	// take to return before it is abandoned: logged, its locks given up,
	// its goroutine left running and no longer waited on (reload.go).
	// Defaults to AbandonAfterDefault.
	AbandonAfter time.Duration
	// Installation is the installation's identity
	// (checkpoint.Installation), part of every Idempotency-Key. Required.
	Installation string
	// Peers says how many daemons are running and export the named
	// tenant source (internal/presence: presence.Alive of its
	// presence.SourceKey), this one included: a daemon keeps to its share
	// of the source's lanes (share.go). Nil: no share is kept, and lanes
	// go to whichever daemon fetches them.
	Peers func(ctx context.Context, source string) (int, error)
	// Now is the clock of the run limit (MaxRun), lingering and a pass's
	// length: tests stub it to run those rules
	// without sleeping. Timers still wait in real time. Defaults to
	// time.Now.
	Now func() time.Time
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics is optional.
	Metrics *metrics.Metrics
	// Sources are the sources this exporter exports, each to its own
	// destination: resources (Resources) and the configured sources
	// (SYNCER_CONFIG). Defaults to none.
	Sources []Source
	// NoHistory stops writing the rows' story (internal/history): for a
	// benchmark's baseline. Defaults to false: every batch's entries are
	// written with its marks.
	NoHistory bool
}

// Exporter pushes rows under the export lock.
type Exporter struct {
	pool    *pgxpool.Pool
	locker  *locks.Locker
	cfg     Config
	logger  *slog.Logger
	metrics *metrics.Metrics
	// lockCounts counts the export locks the process's jobs hold, by
	// source (lockcounts.go).
	lockCounts *lockCounts

	stopOnce sync.Once
	stopping chan struct{}

	// wakers are the relay's way to the jobs lingering here (wakers.go);
	// gate is the outbox's gate as they move it (gate.go).
	wakers      wakers
	gate        *gate
	lingerSlots *slots
	// turns are the turns of this process's source jobs at their
	// destinations' locks (turns.go).
	turns turnsOf
	// slotWait is the state of turns at the worker slots (slotturn.go).
	slotWait slotWait

	// srcs are the sources exported here, by name: the feed family
	// (source.go). A reload replaces the map whole (Swap), never edits it:
	// read it with sourcesNow.
	srcs atomic.Pointer[map[string]exported]

	// jobs are the jobs running here, so that a reload can stop those of
	// the sources it changed (reload.go).
	jobs runningJobs

	// heldKeys are the feeds' keys held after a transient answer of their
	// own (internal/exporter/heldkeys).
	heldKeys *heldkeys.Keys

	// shares are this daemon's shares of tenant sources' lanes
	// (share.go).
	shares *laneShares

	// lastKeys are the keys of the last batch pushed under each export
	// lock held here, for a run's summary line (lockcounts.go).
	lastKeys lastKeys
}

func (c *Config) validate() error {
	switch {
	case c.Schema == "":
		return errors.New("exporter: config: Schema is required")
	case c.Installation == "":
		return errors.New("exporter: config: Installation is required")
	case c.BatchSize < 0:
		return fmt.Errorf("exporter: config: BatchSize must not be negative, got %d", c.BatchSize)
	case c.MaxItemBytes < 0:
		return fmt.Errorf("exporter: config: MaxItemBytes must not be negative, got %d", c.MaxItemBytes)
	case c.BatchMaxBytes < 0:
		return fmt.Errorf("exporter: config: BatchMaxBytes must not be negative, got %d", c.BatchMaxBytes)
	case c.MaxLingering < 0:
		return fmt.Errorf("exporter: config: MaxLingering must not be negative, got %d", c.MaxLingering)
	case c.ReplayShare < 0 || c.ReplayShare > 1:
		return fmt.Errorf("exporter: config: ReplayShare must be within 0 and 1, got %v", c.ReplayShare)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"LockBusySnooze", c.LockBusySnooze}, {"HotPoll", c.HotPoll}, {"HotLinger", c.HotLinger},
		{"ColdLinger", c.ColdLinger}, {"MaxRun", c.MaxRun},
		{"MaxSnooze", c.MaxSnooze}, {"PassLength", c.PassLength}, {"AbandonAfter", c.AbandonAfter},
	} {
		if d.v < 0 {
			return fmt.Errorf("exporter: config: %s must not be negative, got %s", d.name, d.v)
		}
	}
	return nil
}

// New returns an Exporter.
func New(pool *pgxpool.Pool, locker *locks.Locker, cfg *Config) (*Exporter, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	if err := c.validate(); err != nil {
		return nil, err
	}
	lim := feed.Limits{Items: c.BatchSize, Bytes: c.BatchMaxBytes, MaxItemBytes: c.MaxItemBytes}.WithDefaults()
	c.BatchSize, c.BatchMaxBytes, c.MaxItemBytes = lim.Items, lim.Bytes, lim.MaxItemBytes
	c.LockBusySnooze = cmp.Or(c.LockBusySnooze, LockBusySnoozeDefault)
	c.HotPoll = cmp.Or(c.HotPoll, HotPollDefault)
	c.HotLinger = cmp.Or(c.HotLinger, HotLingerDefault)
	c.ColdLinger = cmp.Or(c.ColdLinger, ColdLingerDefault)
	c.MaxRun = cmp.Or(c.MaxRun, MaxRunDefault)
	c.ReplayChunkBatches = cmp.Or(c.ReplayChunkBatches, ReplayChunkBatchesDefault)
	c.ReplayShare = cmp.Or(c.ReplayShare, ReplayShareDefault)
	c.MaxSnooze = cmp.Or(c.MaxSnooze, MaxSnoozeDefault)
	c.PassLength = cmp.Or(c.PassLength, PassLengthDefault)
	c.MaxLingering = cmp.Or(c.MaxLingering, MaxLingeringDefault)
	c.AbandonAfter = cmp.Or(c.AbandonAfter, AbandonAfterDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	e := &Exporter{
		pool: pool, locker: locker, cfg: c, logger: c.Logger, metrics: c.Metrics,
		stopping:    make(chan struct{}),
		lingerSlots: &slots{max: c.MaxLingering},
		turns:       turnsOf{held: map[string]bool{}, wants: map[string]map[string]bool{}},
		lockCounts:  &lockCounts{metrics: c.Metrics},
		heldKeys:    heldkeys.New(pool, c.Now, c.Logger),
	}
	e.gate = newGate(pool, c.Logger, func() int { return len(e.sourcesNow()) })
	e.shares = &laneShares{peersOf: c.Peers, now: c.Now, lanesOf: e.lanesOf, wakers: &e.wakers,
		exported: func(name string) bool { _, ok := e.sourcesNow()[name]; return ok }}
	srcs, err := e.family(c.Sources)
	if err != nil {
		return nil, err
	}
	e.srcs.Store(&srcs)
	e.announce(srcs)
	return e, nil
}

// announce makes the lock series of the sources exported here, at their
// count (lockCounts.count).
func (e *Exporter) announce(srcs map[string]exported) {
	for name, s := range srcs {
		e.lockCounts.count(name, s.base().DestinationName, 0)
	}
}

// BatchSize is the effective batch size.
func (e *Exporter) BatchSize() int { return e.cfg.BatchSize }

// LockKey is the key of source name's export lock.
func (e *Exporter) LockKey(name string) int64 { return locks.ExportKey(e.cfg.Schema, name) }

// Shutdown tells running jobs to start no new batch. The batch in flight
// finishes (or is cancelled by the job's context), is marked, and the job
// snoozes so River runs it again after the restart.
func (e *Exporter) Shutdown() { e.stopOnce.Do(func() { close(e.stopping) }) }

func (e *Exporter) isStopping() bool {
	select {
	case <-e.stopping:
		return true
	default:
		return false
	}
}

// errStopping ends a pass because the daemon is shutting down.
var errStopping = errors.New("exporter: shutting down")

// now reads the exporter's clock (Config.Now).
func (e *Exporter) now() time.Time { return e.cfg.Now() }

// since is the time elapsed since t by the exporter's clock.
func (e *Exporter) since(t time.Time) time.Duration { return e.cfg.Now().Sub(t) }
