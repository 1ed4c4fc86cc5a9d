package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// Defaults of WriterConfig.
const (
	FlushIntervalDefault = 200 * time.Millisecond
	FlushEntriesDefault  = 1024
	MaxQueuedDefault     = 4096
	WriteTimeoutDefault  = 10 * time.Second
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// FlushInterval is the longest an entry waits in the queue before it
	// is written. Defaults to FlushIntervalDefault (200 ms).
	FlushInterval time.Duration
	// FlushEntries is the number of entries queued that are written at
	// once, without waiting for the interval. Defaults to
	// FlushEntriesDefault.
	FlushEntries int
	// MaxQueued bounds the entries queued: Add waits while as many are.
	// One batch may go past it (a batch is never split), and a statement
	// being written holds as many again. Defaults to MaxQueuedDefault.
	MaxQueued int
	// WriteTimeout bounds one statement. Defaults to WriteTimeoutDefault.
	WriteTimeout time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics is optional.
	Metrics *metrics.Metrics
}

func (c *WriterConfig) validate() error {
	switch {
	case c.FlushInterval < 0:
		return fmt.Errorf("history: writer config: FlushInterval must not be negative, got %s", c.FlushInterval)
	case c.FlushEntries < 0:
		return fmt.Errorf("history: writer config: FlushEntries must not be negative, got %d", c.FlushEntries)
	case c.MaxQueued < 0:
		return fmt.Errorf("history: writer config: MaxQueued must not be negative, got %d", c.MaxQueued)
	case c.WriteTimeout < 0:
		return fmt.Errorf("history: writer config: WriteTimeout must not be negative, got %s", c.WriteTimeout)
	}
	return nil
}

// errNoRoom is returned by Add when its context ends before the queue had
// room: the entries are not written.
var errNoRoom = errors.New("history: writer: no room in the queue")

// Writer writes the entries of the batches handed to it (Add) off the
// caller's path: several batches' entries in one statement, on a
// connection of its own from the pool, after at most FlushInterval. Its
// queue is bounded: Add waits for room rather than drop entries, so a
// story that cannot be written as fast as the export runs slows the
// export down instead of losing entries or growing the daemon. A write
// that fails is logged and counted; its entries are lost to the story,
// never to the export.
//
// Its goroutine starts with the first Add; Close writes what is queued
// and stops it. A Writer is safe for concurrent use.
type Writer struct {
	q   database.Querier
	cfg WriterConfig

	start sync.Once
	kick  chan struct{} // a flush is due before the interval
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	pending *rows
	// taken is closed when the writer takes pending to write it: room
	// for those waiting in Add.
	taken    chan struct{}
	closed   bool
	closeCtx context.Context
}

// NewWriter returns a Writer that writes on q (a pool: each statement
// takes a connection of its own).
func NewWriter(q database.Querier, cfg *WriterConfig) (*Writer, error) {
	if cfg == nil {
		cfg = &WriterConfig{}
	}
	c := *cfg
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.FlushInterval = cmp.Or(c.FlushInterval, FlushIntervalDefault)
	c.MaxQueued = cmp.Or(c.MaxQueued, MaxQueuedDefault)
	c.FlushEntries = min(cmp.Or(c.FlushEntries, FlushEntriesDefault), c.MaxQueued)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Writer{
		q: q, cfg: c,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		pending: newRows(), taken: make(chan struct{}),
	}, nil
}

// Add queues b's entries, to be written within FlushInterval. It waits
// while the queue is full, until the writer takes it or ctx ends (then b's
// entries are not written, and the error says so). After Close, Add writes
// b's entries itself. b is read before Add returns, never after.
func (w *Writer) Add(ctx context.Context, b *Batch) error {
	w.start.Do(func() { go w.run() })
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return w.writeNow(ctx, b)
		}
		if w.pending.len() < w.cfg.MaxQueued {
			w.pending.addBatch(b)
			due := w.pending.len() >= w.cfg.FlushEntries
			w.mu.Unlock()
			if due {
				w.due()
			}
			return nil
		}
		taken := w.taken
		w.mu.Unlock()
		w.due()
		select {
		case <-taken:
		case <-ctx.Done():
			w.cfg.Metrics.HistoryWriteFailed()
			return fmt.Errorf("%w: %w", errNoRoom, context.Cause(ctx))
		}
	}
}

// writeNow writes b's entries at once: for an Add after Close.
func (w *Writer) writeNow(ctx context.Context, b *Batch) error {
	r := newRows()
	r.addBatch(b)
	wctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	defer cancel()
	return w.write(wctx, r)
}

func (w *Writer) due() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Close writes what is queued and stops the writer, waiting for it until
// ctx ends. An Add after Close writes its batch at once.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.closeCtx = ctx
	started := true
	w.start.Do(func() { started = false })
	// Those waiting in Add see closed and write their batches themselves.
	close(w.taken)
	w.taken = make(chan struct{})
	w.mu.Unlock()
	if !started {
		return nil
	}
	close(w.stop)
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("history: writer: close: %w", context.Cause(ctx))
	}
}

// run writes the queue when FlushEntries wait or every FlushInterval,
// until Close, then once more.
func (w *Writer) run() {
	defer close(w.done)
	spare := newRows()
	t := time.NewTicker(w.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-w.kick:
		case <-t.C:
		case <-w.stop:
			w.mu.Lock()
			ctx := w.closeCtx
			w.mu.Unlock()
			w.flush(ctx, spare)
			return
		}
		spare = w.flush(context.Background(), spare)
	}
}

// flush takes the queue, leaves spare (empty) in its place, writes it,
// and returns it emptied: the next spare.
func (w *Writer) flush(ctx context.Context, spare *rows) *rows {
	w.mu.Lock()
	r := w.pending
	if r.len() == 0 {
		w.mu.Unlock()
		return spare
	}
	w.pending = spare
	close(w.taken)
	w.taken = make(chan struct{})
	w.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	defer cancel()
	_ = w.write(wctx, r)
	r.reset()
	return r
}

// write writes r, counting and logging the outcome.
func (w *Writer) write(ctx context.Context, r *rows) error {
	n := r.len()
	if err := write(ctx, w.q, r); err != nil {
		w.cfg.Metrics.HistoryWriteFailed()
		w.cfg.Logger.WarnContext(ctx, "history: the rows' story was not written; the export goes on",
			slog.Int("entries", n), slog.String("error", err.Error()))
		return err
	}
	w.cfg.Metrics.HistoryWritten(n)
	return nil
}
