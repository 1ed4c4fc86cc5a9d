package database

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Trim bounds the connections a pool keeps open to those its work needs:
// as many as were in use at once over the last Idle, and at least Floor
// (contract section 12, "Sessions": 4 server sessions for an idle daemon,
// the locks' holder and the relay's LISTEN among them).
//
// pgxpool's own idle close (pool_max_conn_idle_time) cannot do it: its
// health check takes every idle connection and gives them back in the
// reverse order (AcquireAllIdle, then ReleaseUnused), so the connection
// unused the longest is the next one handed out, and a daemon's periodic
// work, seldom two statements at once, kept all 5 in use within 30 s
// (docs/design.md, "Trimming the pool"). Counting the connections in use
// at once does not depend on which of them served.
type Trim struct {
	// Floor is how many connections stay open however long unused. 0
	// turns trimming off.
	Floor int
	// Idle is how long the pool keeps the connections it needed at once:
	// a pool under load, all its connections in use every few
	// milliseconds, closes none to open it again.
	Idle time.Duration
	// Every is how often at most the pool is trimmed; a connection given
	// back less than Every ago stays.
	Every time.Duration
	// Grow is how long an acquire waits for a connection given back
	// before the pool opens one above the floor: the daemon's periodic
	// work (the presence, the gauges, the history's tidy, River's polls)
	// ran on whole-second tickers started together, so three short
	// statements came at once every second or two, each time a backend's
	// start once trimmed. Each loop has its own phase since
	// (internal/daemon/phase.go), but River's fetch poll and the relay's
	// wander and may still meet two others. Each runs for a millisecond
	// or two.
	Grow time.Duration
}

// The pool's trim unless changed: see Trim.
const (
	PoolTrimFloorDefault = 2
	PoolTrimIdleDefault  = 5 * time.Second
	PoolTrimEveryDefault = time.Second
	PoolTrimGrowDefault  = 20 * time.Millisecond
)

// DefaultTrim is the trim of every pool Open and OpenPools open.
func DefaultTrim() Trim {
	return Trim{Floor: PoolTrimFloorDefault, Idle: PoolTrimIdleDefault, Every: PoolTrimEveryDefault, Grow: PoolTrimGrowDefault}
}

// TrimPool makes the pool of cfg close the idle connections above the
// most it had in use at once over the last t.Idle, and above t.Floor,
// the longest unused first. It runs no goroutine of its own, so it needs no
// stopping and ends with the pool: the pool is trimmed as a connection is
// given back (pgxpool's release tracer), at most every t.Every. A pool
// nobody uses is trimmed no more, and pgxpool's idle close
// (pool_max_conn_idle_time) closes its connections then. It takes
// cfg.ConnConfig.Tracer, which must be unset, and chains cfg.BeforeClose.
func TrimPool(cfg *pgxpool.Config, t Trim) {
	if t.Floor <= 0 || cfg.ConnConfig.Tracer != nil {
		return
	}
	tr := &trimmer{cfg: t, floor: max(t.Floor, int(cfg.MinConns)), used: map[*pgx.Conn]time.Time{}, returning: map[*pgx.Conn]bool{}, grow: make(chan struct{}, 1)}
	cfg.ConnConfig.Tracer = tr
	prev := cfg.BeforeClose
	cfg.BeforeClose = func(c *pgx.Conn) {
		tr.forget(c)
		if prev != nil {
			prev(c)
		}
	}
}

// trimmer is a pool's trim: how many connections were in use at once
// lately, and when each was last given back.
type trimmer struct {
	cfg   Trim
	floor int
	// pool is the pool traced, the first seen: a config copied from this
	// one's into another pool (a Locker's own) shares its tracer, and
	// that pool is neither counted nor trimmed here.
	pool atomic.Pointer[pgxpool.Pool]
	// busy is held by the one trim under way.
	busy atomic.Bool
	// grow is held by the one acquire waiting for a connection given
	// back (TraceAcquireStart).
	grow chan struct{}

	mu   sync.Mutex
	used map[*pgx.Conn]time.Time
	// returning are the connections a trim gives back: that is no use.
	returning map[*pgx.Conn]bool
	last      time.Time
	// inUse counts the connections handed out and not given back; peak
	// is its highest since the window began (since), prevPeak the one of
	// the window of cfg.Idle before. The trim keeps as many as were in use at once
	// over the last cfg.Idle: which connection served them does not
	// matter, so the health check's reordering does not either.
	inUse, peak, prevPeak int
	since                 time.Time
}

// mine reports that p is the pool this trimmer traces.
func (t *trimmer) mine(p *pgxpool.Pool) bool {
	return t.pool.CompareAndSwap(nil, p) || t.pool.Load() == p
}

// TraceQueryStart and TraceQueryEnd do nothing: a pgx tracer must be a
// QueryTracer, and the trim only needs the pool's acquires and releases.
func (*trimmer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (*trimmer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceAcquireStart holds an acquire that would open a connection above
// the floor for up to cfg.Grow, until one is given back. A pool at its
// maximum waits in pgxpool as it always did. The acquires held wait one
// at a time (grow), or all would see the same connection given back and
// all but one open another.
func (t *trimmer) TraceAcquireStart(ctx context.Context, pool *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if t.cfg.Grow <= 0 || !t.mine(pool) {
		return ctx
	}
	t.mu.Lock()
	inUse := t.inUse
	t.mu.Unlock()
	if inUse < t.floor {
		// A connection is idle, or the pool is below its floor.
		return ctx
	}
	deadline := time.Now().Add(t.cfg.Grow)
	held := false
	for {
		st := pool.Stat()
		if st.IdleConns() > 0 || int(st.TotalConns()) < t.floor || st.TotalConns() >= st.MaxConns() ||
			!time.Now().Before(deadline) || ctx.Err() != nil {
			if held {
				// Given back by TraceAcquireEnd, once this acquire took
				// the idle connection.
				return context.WithValue(ctx, growKey{}, true)
			}
			return ctx
		}
		if !held {
			select {
			case t.grow <- struct{}{}:
				held = true
				continue
			case <-time.After(time.Until(deadline)):
				return ctx
			case <-ctx.Done():
				return ctx
			}
		}
		// A statement of the periodic work lasts a millisecond or two:
		// polled, rather than woken by the release, which gives its
		// connection back only after the tracer has run.
		time.Sleep(time.Millisecond)
	}
}

// growKey marks the context of an acquire that holds trimmer.grow.
type growKey struct{}

// TraceAcquireEnd counts a connection handed out.
func (t *trimmer) TraceAcquireEnd(ctx context.Context, pool *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if ctx.Value(growKey{}) != nil {
		<-t.grow
	}
	if d.Err != nil || !t.mine(pool) {
		return
	}
	t.mu.Lock()
	t.inUse++
	t.peak = max(t.peak, t.inUse)
	t.mu.Unlock()
}

// TraceRelease notes the use of a connection given back, and trims the
// pool when it is time.
func (t *trimmer) TraceRelease(pool *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	if !t.mine(pool) {
		return
	}
	now := time.Now()
	t.mu.Lock()
	if t.returning[d.Conn] {
		delete(t.returning, d.Conn)
		t.mu.Unlock()
		return
	}
	t.used[d.Conn] = now
	t.inUse = max(t.inUse-1, 0)
	if now.Sub(t.since) >= t.cfg.Idle {
		t.prevPeak, t.peak, t.since = t.peak, t.inUse, now
	}
	due := now.Sub(t.last) >= t.cfg.Every
	if due {
		t.last = now
	}
	t.mu.Unlock()
	if due && t.busy.CompareAndSwap(false, true) {
		defer t.busy.Store(false)
		t.trim(pool, now)
	}
}

func (t *trimmer) forget(c *pgx.Conn) {
	t.mu.Lock()
	delete(t.used, c)
	delete(t.returning, c)
	t.mu.Unlock()
}

// trim closes the idle connections above those in use at once over the
// last t.cfg.Idle (and above the floor), the longest unused first, and
// gives the others back, the most recently used last so that it is the
// next one handed out.
func (t *trimmer) trim(pool *pgxpool.Pool, now time.Time) {
	st := pool.Stat()
	t.mu.Lock()
	// A connection hijacked from the pool is never given back: what the
	// pool says is in use bounds the count (the one being given back is
	// in use still).
	t.inUse = min(t.inUse, max(int(st.AcquiredConns())-1, 0))
	keep := max(t.floor, t.peak, t.prevPeak)
	t.mu.Unlock()
	total := int(st.TotalConns())
	if total <= keep {
		return
	}
	idle := pool.AcquireAllIdle(context.Background())
	if len(idle) == 0 {
		return
	}
	t.mu.Lock()
	at := make(map[*pgxpool.Conn]time.Time, len(idle))
	for _, c := range idle {
		u, ok := t.used[c.Conn()]
		if !ok {
			// Opened by the pool and never handed out: unused from now.
			u = now
			t.used[c.Conn()] = u
		}
		at[c] = u
	}
	t.mu.Unlock()
	slices.SortFunc(idle, func(a, b *pgxpool.Conn) int { return at[a].Compare(at[b]) })

	var closing []*pgx.Conn
	kept := idle[:0]
	for _, c := range idle {
		if total > keep && now.Sub(at[c]) >= t.cfg.Every {
			closing = append(closing, c.Hijack())
			total--
			continue
		}
		kept = append(kept, c)
	}
	t.mu.Lock()
	for _, c := range closing {
		delete(t.used, c)
	}
	for _, c := range kept {
		t.returning[c.Conn()] = true
	}
	t.mu.Unlock()
	for _, c := range kept {
		c.Release()
	}
	for _, c := range closing {
		// A Terminate message and the socket's close: it waits on no
		// answer from the server.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Close(ctx)
		cancel()
	}
}
