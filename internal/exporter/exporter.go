// Package exporter is the only code that pushes rows to the third party. It
// runs as River jobs: the live sync, and replays.
//
// Guarantees, each resting on one mechanism:
//   - One pusher at a time, across all daemons: every push happens under the
//     global export advisory lock, taken with a non-blocking try. A job that
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
//   - Latency without a job per insert: a live sync job that has drained the
//     table keeps the lock for a while and polls (gate shut) or waits for a
//     notification (gate open), so a new row needs no River round trip.
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Defaults for Config.
const (
	BatchSizeDefault          = 500
	BatchMaxBytesDefault      = 4 << 20
	LockBusySnoozeDefault     = 250 * time.Millisecond
	HotPollDefault            = 5 * time.Millisecond
	HotLingerDefault          = 500 * time.Millisecond
	ColdLingerDefault         = 5 * time.Second
	MaxRunDefault             = 30 * time.Second
	ReplayChunkBatchesDefault = 20
	ReplayHoldDefault         = 2 * time.Second
	MarkTimeoutDefault        = 30 * time.Second
	MaxInFlightDefault        = 4
	ReplayShareDefault        = 0.25
	MaxSnoozeDefault          = 10 * time.Second
	PassLengthDefault         = 2 * time.Second
)

// Pusher delivers one batch, handling retries, splits and the rate limit.
type Pusher interface {
	Deliver(ctx context.Context, b delivery.Batch) (*delivery.Outcome, error)
}

// Config configures an Exporter.
type Config struct {
	// BatchSize is the most rows a batch holds. Defaults to BatchSizeDefault.
	BatchSize int
	// BatchMaxBytes is the most payload bytes a batch holds. Defaults to
	// BatchMaxBytesDefault.
	BatchMaxBytes int
	// LockBusySnooze is how long a job snoozes when another session holds the
	// export lock. Defaults to LockBusySnoozeDefault.
	LockBusySnooze time.Duration
	// HotPoll is how often a live job that has drained the table looks for
	// new rows while writes are flowing. Defaults to HotPollDefault.
	HotPoll time.Duration
	// HotLinger is how long the live job keeps polling after it last found a
	// row, before it opens the gate and waits for notifications. Defaults to
	// HotLingerDefault.
	HotLinger time.Duration
	// ColdLinger is how long the live job keeps the lock waiting for a
	// notification before it ends. Defaults to ColdLingerDefault.
	ColdLinger time.Duration
	// MaxRun bounds one execution of a job; a job with work left snoozes for
	// zero and runs again, so River's stuck-job rescue stays meaningful.
	// Defaults to MaxRunDefault.
	MaxRun time.Duration
	// Schema is the schema of the resources table, which names the export
	// lock. Required.
	Schema string
	// ReplayChunkBatches is how many batches a replay pushes before it
	// releases the lock. Defaults to ReplayChunkBatchesDefault.
	ReplayChunkBatches int
	// ReplayHold is how long a replay keeps the lock, chunk after chunk,
	// before it gives it back. Defaults to ReplayHoldDefault.
	ReplayHold time.Duration
	// MaxItemBytes is the largest payload sent; a larger row is recorded
	// failed with the reason, never read whole. Defaults to
	// resources.MaxItemBytesDefault.
	MaxItemBytes int
	// MaxInFlight is the most batches pushed and not yet answered at once.
	// Defaults to MaxInFlightDefault.
	MaxInFlight int
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
	// replays and its run limit. Defaults to PassLengthDefault.
	PassLength time.Duration
	// Installation is the installation's identity
	// (checkpoint.Installation), part of every Idempotency-Key. Required.
	Installation string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics is optional.
	Metrics *metrics.Metrics
	// Sources are the configured sources (SYNCER_CONFIG) this exporter
	// exports, each to its own destination, with jobs.SourceArgs. Defaults
	// to none.
	Sources []Source
}

// Exporter pushes rows under the export lock.
type Exporter struct {
	pool    *pgxpool.Pool
	locker  *locks.Locker
	pusher  Pusher
	cfg     Config
	logger  *slog.Logger
	metrics *metrics.Metrics
	lockKey int64

	stopOnce sync.Once
	stopping chan struct{}

	mu     sync.Mutex
	active bool
	wake   chan struct{}

	// sources are the configured sources, by name.
	sources map[string]*Source

	// lastKey is the key of the last batch pushed, for the run's summary
	// line: a third party's support ticket names a key.
	lastKey atomic.Pointer[string]
}

func (e *Exporter) lastPushedKey() string {
	if k := e.lastKey.Load(); k != nil {
		return *k
	}
	return ""
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
	case c.MaxInFlight < 0:
		return fmt.Errorf("exporter: config: MaxInFlight must not be negative, got %d", c.MaxInFlight)
	case c.ReplayShare < 0 || c.ReplayShare > 1:
		return fmt.Errorf("exporter: config: ReplayShare must be within 0 and 1, got %v", c.ReplayShare)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"LockBusySnooze", c.LockBusySnooze}, {"HotPoll", c.HotPoll}, {"HotLinger", c.HotLinger},
		{"ColdLinger", c.ColdLinger}, {"MaxRun", c.MaxRun}, {"ReplayHold", c.ReplayHold},
		{"MaxSnooze", c.MaxSnooze}, {"PassLength", c.PassLength},
	} {
		if d.v < 0 {
			return fmt.Errorf("exporter: config: %s must not be negative, got %s", d.name, d.v)
		}
	}
	return nil
}

// New returns an Exporter.
func New(pool *pgxpool.Pool, locker *locks.Locker, pusher Pusher, cfg *Config) (*Exporter, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.BatchMaxBytes = cmp.Or(c.BatchMaxBytes, BatchMaxBytesDefault)
	c.LockBusySnooze = cmp.Or(c.LockBusySnooze, LockBusySnoozeDefault)
	c.HotPoll = cmp.Or(c.HotPoll, HotPollDefault)
	c.HotLinger = cmp.Or(c.HotLinger, HotLingerDefault)
	c.ColdLinger = cmp.Or(c.ColdLinger, ColdLingerDefault)
	c.MaxRun = cmp.Or(c.MaxRun, MaxRunDefault)
	c.ReplayChunkBatches = cmp.Or(c.ReplayChunkBatches, ReplayChunkBatchesDefault)
	c.ReplayHold = cmp.Or(c.ReplayHold, ReplayHoldDefault)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, MaxInFlightDefault)
	c.ReplayShare = cmp.Or(c.ReplayShare, ReplayShareDefault)
	c.MaxSnooze = cmp.Or(c.MaxSnooze, MaxSnoozeDefault)
	c.PassLength = cmp.Or(c.PassLength, PassLengthDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	byName := make(map[string]*Source, len(c.Sources))
	for i := range c.Sources {
		s := c.Sources[i]
		if s.Source == nil || s.Pusher == nil {
			return nil, fmt.Errorf("exporter: config: Sources[%d]: Source and Pusher are required", i)
		}
		byName[s.Source.Name] = &s
	}
	return &Exporter{sources: byName,
		pool: pool, locker: locker, pusher: pusher, cfg: c, logger: c.Logger, metrics: c.Metrics,
		lockKey:  locks.ExportKey(c.Schema),
		stopping: make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}, nil
}

// BatchSize is the effective batch size.
func (e *Exporter) BatchSize() int { return e.cfg.BatchSize }

// MaxInFlight is the effective limit of batches unanswered at once.
func (e *Exporter) MaxInFlight() int { return e.cfg.MaxInFlight }

// LockKey is the export lock's key.
func (e *Exporter) LockKey() int64 { return e.lockKey }

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

// Wake implements outbox.Waker: a live job running here takes the
// notification.
func (e *Exporter) Wake() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.active {
		return false
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return true
}

// Active implements outbox.Waker.
func (e *Exporter) Active() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active
}

var _ outbox.Waker = (*Exporter)(nil)

func (e *Exporter) activate() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active = true
}

// deactivate stops taking wake-ups and reports whether one was taken that
// the job has not handled yet.
func (e *Exporter) deactivate() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active = false
	select {
	case <-e.wake:
		return true
	default:
		return false
	}
}

// errStopping ends a pass because the daemon is shutting down.
var errStopping = errors.New("exporter: shutting down")

// source is what a pass exports: the live pending rows or a replay's
// range of resources, or a configured source's pending keys.
type source struct {
	checkpoint string
	// fetch returns the next batch and the salt of its key: a replay's own,
	// or the live generation's (resources.LiveSalt) read with the rows.
	fetch func(ctx context.Context, after int64, lim resources.Limits) ([]resources.Row, string, error)
	// fetchKeys, set for a configured source instead of fetch, returns the
	// next batch of its pending keys after afterKey (nil: from the first).
	fetchKeys func(ctx context.Context, afterKey *string) ([]sources.Row, error)
	// salt is the keys' salt of a configured source.
	salt string
	// sink is where a configured source's batches go; nil: resources'.
	sink *sink
}

// sink is where a pass's batches go and how their outcomes are written,
// in the marker's transaction on the lock's connection.
type sink struct {
	// source and destination label a configured source's metrics; empty
	// for resources.
	source, destination string
	pusher              Pusher
	// mark queues the statements that write a group of outcomes, to be
	// sent with the rest of the marker transaction in one round trip.
	mark func(b *pgx.Batch, accepted, rejected []thirdparty.Item, errs []string) error
}

// rowsSink delivers to the resources' destination and marks resources.
func (e *Exporter) rowsSink() *sink {
	return &sink{pusher: e.pusher, mark: func(b *pgx.Batch, accepted, rejected []thirdparty.Item, errs []string) error {
		var o resources.Outcomes
		for _, it := range accepted {
			if it.Deleted {
				o.SyncedTombstones.Add(it.ID, it.Version)
			} else {
				o.Synced.Add(it.ID, it.Version)
			}
		}
		for i, it := range rejected {
			if it.Deleted {
				o.FailedTombstones.Add(it.ID, it.Version)
				o.TombstoneErrs = append(o.TombstoneErrs, errs[i])
			} else {
				o.Failed.Add(it.ID, it.Version)
				o.Errs = append(o.Errs, errs[i])
			}
		}
		resources.QueueMarks(b, o)
		return nil
	}}
}

func (e *Exporter) sinkOf(src source) *sink {
	if src.sink != nil {
		return src.sink
	}
	return e.rowsSink()
}

func (e *Exporter) liveSource() source {
	return source{
		checkpoint: checkpoint.Live,
		fetch: func(ctx context.Context, after int64, lim resources.Limits) ([]resources.Row, string, error) {
			rows, gen, err := resources.Pending(ctx, e.pool, after, lim, nil)
			return rows, resources.LiveSalt(gen), err
		},
	}
}

func (e *Exporter) limits() resources.Limits {
	return resources.Limits{Rows: e.cfg.BatchSize, Bytes: e.cfg.BatchMaxBytes, MaxItemBytes: e.cfg.MaxItemBytes}
}
