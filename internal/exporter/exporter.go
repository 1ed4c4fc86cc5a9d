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
)

// LockNamespace is the namespace of the export lock's key.
const LockNamespace = "syncer"

// LockKey returns the key of the export lock of the installation in schema:
// locks.Key("syncer", "export:"+schema). Advisory locks are per database, so
// the schema is part of the name: two installations in one database must not
// share a lock.
func LockKey(schema string) int64 { return locks.Key(LockNamespace, "export:"+schema) }

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
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics is optional.
	Metrics *metrics.Metrics
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

// New returns an Exporter.
func New(pool *pgxpool.Pool, locker *locks.Locker, pusher Pusher, cfg *Config) (*Exporter, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	if c.Schema == "" {
		return nil, errors.New("exporter: Config.Schema is required")
	}
	if c.BatchSize < 0 {
		return nil, fmt.Errorf("exporter: BatchSize must be positive, got %d", c.BatchSize)
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Exporter{
		pool: pool, locker: locker, pusher: pusher, cfg: c, logger: c.Logger, metrics: c.Metrics,
		lockKey:  LockKey(c.Schema),
		stopping: make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}, nil
}

// BatchSize is the effective batch size.
func (e *Exporter) BatchSize() int { return e.cfg.BatchSize }

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

// source is what a pass exports: the live pending rows or a replay's range.
type source struct {
	checkpoint string
	// live sources only send rows that are still pending.
	live bool
	// fetch returns the next batch and the salt of its key: a replay's own,
	// or the live generation's (resources.LiveSalt) read with the rows.
	fetch func(ctx context.Context, after int64, lim resources.Limits) ([]resources.Row, string, error)
}

func (e *Exporter) liveSource() source {
	return source{
		checkpoint: checkpoint.Live,
		live:       true,
		fetch: func(ctx context.Context, after int64, lim resources.Limits) ([]resources.Row, string, error) {
			rows, gen, err := resources.Pending(ctx, e.pool, after, lim, nil)
			return rows, resources.LiveSalt(gen), err
		},
	}
}

func (e *Exporter) limits() resources.Limits {
	return resources.Limits{Rows: e.cfg.BatchSize, Bytes: e.cfg.BatchMaxBytes}
}

func toItems(rows []resources.Row) []thirdparty.Item {
	items := make([]thirdparty.Item, len(rows))
	for i, r := range rows {
		items[i] = thirdparty.Item{ID: r.ID, Version: r.Version, Payload: r.Payload, Deleted: r.Deleted}
	}
	return items
}

// batch is a batch read and keyed, not yet pushed.
type batch struct {
	items []thirdparty.Item
	salt  string
	key   string
}

func (b batch) inflight() checkpoint.Inflight {
	in := checkpoint.Inflight{Key: b.key, Salt: b.salt, IDs: make([]int64, len(b.items)), Versions: make([]int64, len(b.items))}
	for i, it := range b.items {
		in.IDs[i], in.Versions[i] = it.ID, it.Version
	}
	return in
}

func inflightOf(bs []batch) []checkpoint.Inflight {
	out := make([]checkpoint.Inflight, len(bs))
	for i, b := range bs {
		out[i] = b.inflight()
	}
	return out
}

type fetched struct {
	rows []resources.Row
	salt string
	err  error
}

// passResult says what a pass did.
type passResult struct {
	rows    int
	batches int
	lastID  int64
	// done is true when the pass reached the end of its source.
	done bool
}

// markWindow is how many batches may be sent before the mark of the
// earliest of them commits: the push path and the marks overlap, and a
// crash leaves at most this many batches sent and unmarked, all recorded.
const markWindow = 3

// pushed is a batch the third party answered, waiting for its mark.
type pushed struct {
	b   batch
	out *delivery.Outcome
	// window is the batches recorded as in flight once this mark commits:
	// those after it, up to markWindow of them.
	window []checkpoint.Inflight
}

// pass pushes src's rows after startAfter, batch by batch, until the source
// is exhausted or maxBatches were pushed (0: no limit).
//
// Three things overlap: reading ahead (a goroutine), pushing (this
// goroutine), and marking (another goroutine, on the lock's connection,
// several pushed batches per transaction when it falls behind). What makes
// the overlap safe is that no batch is pushed before it is recorded as in
// flight: each mark transaction records the markWindow batches that follow
// the last batch it marks, and a push waits until a committed record covers
// its batch.
func (e *Exporter) pass(ctx context.Context, lk *locks.Lock, src source, startAfter int64, maxBatches int) (passResult, error) {
	res := passResult{lastID: startAfter}
	rctx, cancel := context.WithCancel(ctx)
	// One batch waits in the channel while the next is read: the pusher
	// keeps its own read-ahead window, so more would only hold memory.
	ch := make(chan fetched, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ch)
		after := startAfter
		for {
			rows, salt, err := src.fetch(rctx, after, e.limits())
			select {
			case ch <- fetched{rows, salt, err}:
			case <-rctx.Done():
				return
			}
			if err != nil || len(rows) == 0 {
				return
			}
			after = rows[len(rows)-1].ID
		}
	})
	defer func() {
		cancel()
		for range ch {
		}
		wg.Wait()
	}()

	// read is every batch read so far, in order; seq numbers index it.
	var read []batch
	eof := false
	fill := func(upTo int) error {
		for len(read) < upTo && !eof && (maxBatches == 0 || len(read) < maxBatches) {
			f, ok := <-ch
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				eof = true
				break
			}
			if f.err != nil {
				return f.err
			}
			if len(f.rows) == 0 {
				eof = true
				break
			}
			items := toItems(f.rows)
			read = append(read, batch{items: items, salt: f.salt, key: thirdparty.IdempotencyKey(f.salt, items)})
		}
		return nil
	}
	window := func(from int) []checkpoint.Inflight {
		return inflightOf(read[min(from, len(read)):min(from+markWindow, len(read))])
	}

	if err := fill(markWindow); err != nil {
		return res, err
	}
	if len(read) == 0 {
		res.done = true
		return res, nil
	}
	// The first batches of a pass are recorded on their own. This record is
	// not worth an fsync: the mark that follows flushes it, and if the
	// database crashes before, the batches are only re-read, and most likely
	// keyed the same.
	if err := lk.WithTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
			return err
		}
		return checkpoint.SetInflight(ctx, tx, src.checkpoint, window(0))
	}); err != nil {
		return res, err
	}

	// The marker: it marks what was pushed, as many batches per transaction
	// as are waiting, and reports how far the committed record reaches.
	toMark := make(chan pushed, markWindow)
	var (
		mu       sync.Mutex
		reported progress
	)
	notify := make(chan struct{}, 1)
	var mwg sync.WaitGroup
	mwg.Go(func() {
		for p := range toMark {
			group := []pushed{p}
		more:
			for {
				select {
				case q, ok := <-toMark:
					if !ok {
						break more
					}
					group = append(group, q)
				default:
					break more
				}
			}
			err := e.mark(ctx, lk, src, group)
			mu.Lock()
			if err != nil {
				reported.err = err
			} else {
				reported.marked += len(group)
				reported.recorded = reported.marked + len(group[len(group)-1].window)
			}
			mu.Unlock()
			select {
			case notify <- struct{}{}:
			default:
			}
			if err != nil {
				for range toMark {
				}
				return
			}
		}
	})
	closed := false
	closeMarker := func() {
		if !closed {
			closed = true
			close(toMark)
			mwg.Wait()
		}
	}
	defer closeMarker()

	recorded := len(window(0))
	marked := 0
	var markErr error
	// absorb takes in what the marker reported.
	absorb := func() {
		mu.Lock()
		p := reported
		mu.Unlock()
		if p.err != nil && markErr == nil {
			markErr = p.err
		}
		recorded = max(recorded, p.recorded)
		for ; marked < p.marked; marked++ {
			// Marked batches are counted and let go: a pass over a
			// million rows must not keep them.
			res.count(read[marked])
			read[marked].items = nil
		}
	}
	// finish lets the marker mark everything pushed and reports its error.
	finish := func() error {
		closeMarker()
		absorb()
		return markErr
	}

	for j := 0; ; j++ {
		if j == len(read) {
			if err := fill(j + 1); err != nil {
				return res, errors.Join(err, finish())
			}
			if j == len(read) {
				res.done = eof
				return res, finish()
			}
		}
		if e.isStopping() {
			return res, errors.Join(errStopping, finish())
		}
		// Never push a batch the committed record does not cover.
		absorb()
		for j >= recorded && markErr == nil {
			<-notify
			absorb()
		}
		if markErr != nil {
			return res, errors.Join(markErr, finish())
		}
		b := read[j]
		out, err := e.push(ctx, b.salt, b.key, b.items)
		if err != nil {
			return res, errors.Join(err, finish())
		}
		readErr := fill(j + 1 + markWindow)
		toMark <- pushed{b: b, out: out, window: window(j + 1)}
		if readErr != nil {
			return res, errors.Join(readErr, finish())
		}
	}
}

// progress is what the marker reports to the pusher.
type progress struct {
	marked   int // batches marked so far in this pass
	recorded int // batches covered by the committed record of batches in flight
	err      error
}

func (r *passResult) count(b batch) {
	r.rows += len(b.items)
	r.batches++
	r.lastID = b.items[len(b.items)-1].ID
}

// push delivers one batch and records metrics.
func (e *Exporter) push(ctx context.Context, salt, key string, items []thirdparty.Item) (*delivery.Outcome, error) {
	start := time.Now()
	out, err := e.pusher.Deliver(ctx, delivery.Batch{Key: key, Salt: salt, Items: items})
	if err != nil {
		e.metrics.BatchError()
		return nil, fmt.Errorf("exporter: push batch %s: %w", key, err)
	}
	e.metrics.Batch(len(out.Accepted), len(out.Rejected), time.Since(start))
	e.lastKey.Store(&key)
	e.logger.DebugContext(ctx, "exporter: batch pushed", slog.String("idempotency_key", key),
		slog.Int("items", len(items)), slog.Int("accepted", len(out.Accepted)),
		slog.Int("rejected", len(out.Rejected)), slog.Int("requests", out.Requests),
		slog.Duration("took", time.Since(start)))
	return out, nil
}

// mark writes the outcome of pushed batches, the checkpoint and the batches
// now in flight in one transaction on the lock's connection. It runs even
// when the job is being cancelled: what the third party accepted must be
// recorded.
func (e *Exporter) mark(ctx context.Context, lk *locks.Lock, src source, group []pushed) error {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
	defer cancel()
	var acc, rej resources.Versions
	var errs []string
	for _, p := range group {
		for _, it := range p.out.Accepted {
			acc.Add(it.ID, it.Version)
		}
		for _, r := range p.out.Rejected {
			rej.Add(r.Item.ID, r.Item.Version)
			errs = append(errs, r.Error)
		}
	}
	last := group[len(group)-1]
	err := lk.WithTx(mctx, func(tx pgx.Tx) error {
		if _, err := resources.MarkSynced(mctx, tx, acc); err != nil {
			return err
		}
		if _, err := resources.MarkFailed(mctx, tx, rej, errs); err != nil {
			return err
		}
		return checkpoint.Advance(mctx, tx, src.checkpoint, checkpoint.Progress{
			LastID: last.b.items[len(last.b.items)-1].ID, Rows: int64(acc.Len()), Failed: int64(rej.Len()),
			Batches: int64(len(group)),
		}, last.window)
	})
	if err != nil {
		return fmt.Errorf("exporter: mark batch: %w", err)
	}
	if rej.Len() > 0 {
		e.logger.WarnContext(ctx, "exporter: items rejected by the third party",
			slog.Int("rejected", rej.Len()), slog.String("first_error", errs[0]))
	}
	return nil
}

// resume pushes the batches a previous holder recorded as in flight, if any,
// before anything else, so they go again as the same batches. It returns
// where the source's cursor stands after them.
func (e *Exporter) resume(ctx context.Context, lk *locks.Lock, src source) (int64, error) {
	cp, err := checkpoint.Get(ctx, e.pool, src.checkpoint)
	if err != nil {
		return 0, err
	}
	lastID := cp.LastID
	for i, in := range cp.Inflight {
		if len(in.IDs) == 0 {
			continue
		}
		rest := cp.Inflight[i+1:]
		lastID = max(lastID, in.IDs[len(in.IDs)-1])
		items, err := e.loadInflight(ctx, src, in)
		if err != nil {
			return 0, err
		}
		if len(items) == 0 {
			if err := lk.WithTx(ctx, func(tx pgx.Tx) error { return checkpoint.SetInflight(ctx, tx, src.checkpoint, rest) }); err != nil {
				return 0, err
			}
			continue
		}
		key, salt := in.Key, in.Salt
		if len(items) != len(in.IDs) {
			// Some rows changed or were marked since: this is a different
			// batch and must not reuse the key (a third party may check that
			// a key's body never changes). Only these rows can reach it
			// twice.
			key = thirdparty.IdempotencyKey(salt, items)
			e.logger.WarnContext(ctx, "exporter: batch in flight changed since it was recorded; resending the rest under a new key",
				slog.String("recorded_key", in.Key), slog.String("idempotency_key", key),
				slog.Int("recorded", len(in.IDs)), slog.Int("resent", len(items)))
		} else {
			e.logger.InfoContext(ctx, "exporter: resending a batch in flight at the last stop",
				slog.String("idempotency_key", key), slog.Int("items", len(items)))
		}
		out, err := e.push(ctx, salt, key, items)
		if err != nil {
			return 0, err
		}
		if err := e.mark(ctx, lk, src, []pushed{{b: batch{items: items, salt: salt, key: key}, out: out, window: rest}}); err != nil {
			return 0, err
		}
	}
	return lastID, nil
}

// loadInflight returns the rows of a recorded batch that are still at their
// recorded version (and, for the live sync, still pending).
func (e *Exporter) loadInflight(ctx context.Context, src source, in checkpoint.Inflight) ([]thirdparty.Item, error) {
	rows, err := e.pool.Query(ctx, `SELECT id, version, payload::text, synced_at IS NULL AND failed_at IS NULL
		FROM resources WHERE id = ANY($1) ORDER BY id`, in.IDs)
	if err != nil {
		return nil, fmt.Errorf("exporter: load batch in flight: %w", err)
	}
	defer rows.Close()
	want := make(map[int64]int64, len(in.IDs))
	for i, id := range in.IDs {
		want[id] = in.Versions[i]
	}
	var items []thirdparty.Item
	for rows.Next() {
		var it thirdparty.Item
		var payload string
		var pending bool
		if err := rows.Scan(&it.ID, &it.Version, &payload, &pending); err != nil {
			return nil, fmt.Errorf("exporter: load batch in flight: %w", err)
		}
		it.Payload = []byte(payload)
		if it.Version == want[it.ID] && (pending || !src.live) {
			items = append(items, it)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("exporter: load batch in flight: %w", err)
	}
	return items, nil
}
