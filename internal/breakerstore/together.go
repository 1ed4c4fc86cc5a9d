package breakerstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Together keeps the facts of many namespaces (one destination's tenants)
// fresh with one statement for all of them, where each tenant's Shared
// read its own: every tenant sending reads its facts once a second, and
// 200 of them were 200 statements a second on the daemon's pool of five
// connections, each waiting for one in a request's way (issue 54).
//
// A goroutine reads, every half of the refresh period, the facts of every
// namespace asked for in the last ForgetAfter, and stops when none was.
// Load hands out what it read, as long as that read ended within the
// refresh period: the same age a Shared of its own allowed, and no wait.
// A namespace the last read did not cover (its first ask) is read alone at
// once, as a Shared of its own did; one whose facts went stale while the
// goroutine's read covering it runs (a read slower than half the period)
// waits for that read, and reads alone only if it failed. A Load never
// waits for a round and then its own (the first attempt did: a lane's
// look at its tenants, one after another, waited at each). What this
// process wrote meanwhile is laid over what was read before it by the
// namespace's Shared.
type Together struct {
	pool    *pgxpool.Pool
	refresh time.Duration
	now     func() time.Time

	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*togetherEntry
	running bool
	closed  bool
	round   *togetherRound // the read running, nil when none

	reads atomic.Int64
}

// TogetherForgetAfter is how long a namespace not asked for is still read
// by Together's goroutine: a tenant sending asks once a second, a held
// one every two.
const TogetherForgetAfter = 10 * time.Second

// togetherEntry is one namespace's facts as last read.
type togetherEntry struct {
	state State
	began time.Time // when the read that gave state began; zero: none yet
	ended time.Time // when it ended
	asked time.Time
}

// togetherRound is one read of the goroutine's: its namespaces, and done
// closed when it ended.
type togetherRound struct {
	has  map[string]bool
	done chan struct{}
}

// NewTogether reads on pool; refresh 0 means RefreshDefault. Close ends its
// goroutine.
func NewTogether(pool *pgxpool.Pool, refresh time.Duration) *Together {
	if refresh <= 0 {
		refresh = RefreshDefault
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Together{pool: pool, refresh: refresh, now: time.Now, ctx: ctx, stop: stop, entries: map[string]*togetherEntry{}}
}

// Shared is store's Shared whose Load reads through t.
func (t *Together) Shared(store *Store) *Shared {
	s := NewShared(store, t.refresh)
	s.together, s.namespace = t, store.namespace()
	return s
}

// Reads is how many statements t has run.
func (t *Together) Reads() int64 { return t.reads.Load() }

// Close ends the goroutine and waits for it; Load reads alone after it.
func (t *Together) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.stop()
	t.wg.Wait()
}

// load returns namespace's facts and when the read that gave them began.
func (t *Together) load(ctx context.Context, ns string) (State, time.Time, error) {
	now := t.now()
	t.mu.Lock()
	e := t.entries[ns]
	if e == nil {
		e = &togetherEntry{}
		t.entries[ns] = e
	}
	e.asked = now
	if !t.running && !t.closed {
		t.running = true
		t.wg.Add(1)
		go t.run()
	}
	if !e.ended.IsZero() && now.Sub(e.ended) < t.refresh {
		st, began := e.state, e.began
		t.mu.Unlock()
		return st, began, nil
	}
	if rd := t.round; rd != nil && rd.has[ns] {
		t.mu.Unlock()
		select {
		case <-rd.done:
		case <-ctx.Done():
			return State{}, time.Time{}, ctx.Err()
		}
		t.mu.Lock()
		if !e.ended.IsZero() && t.now().Sub(e.ended) < t.refresh {
			st, began := e.state, e.began
			t.mu.Unlock()
			return st, began, nil
		}
	}
	t.mu.Unlock()
	return t.alone(ctx, ns, e)
}

// alone reads one namespace's facts with a statement of its own.
func (t *Together) alone(ctx context.Context, ns string, e *togetherEntry) (State, time.Time, error) {
	ctx, cancel := bounded(ctx, TimeoutDefault)
	defer cancel()
	began := t.now()
	t.reads.Add(1)
	st, err := ReadStateOf(ctx, t.pool, ns)
	if err != nil {
		return State{}, time.Time{}, err
	}
	t.mu.Lock()
	if began.After(e.began) {
		e.state, e.began, e.ended = st, began, t.now()
	}
	t.mu.Unlock()
	return st, began, nil
}

// run reads every namespace asked for within TogetherForgetAfter, every
// half refresh period, until none was or Close.
func (t *Together) run() {
	defer t.wg.Done()
	tick := time.NewTimer(t.refresh / 2)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			t.mu.Lock()
			t.running = false
			t.mu.Unlock()
			return
		case <-tick.C:
		}
		now := t.now()
		t.mu.Lock()
		rd := &togetherRound{has: make(map[string]bool, len(t.entries)), done: make(chan struct{})}
		namespaces := make([]string, 0, len(t.entries))
		for ns, e := range t.entries {
			if now.Sub(e.asked) >= TogetherForgetAfter {
				delete(t.entries, ns)
				continue
			}
			rd.has[ns] = true
			namespaces = append(namespaces, ns)
		}
		if len(namespaces) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		t.round = rd
		t.mu.Unlock()

		ctx, cancel := context.WithTimeout(t.ctx, TimeoutDefault)
		began := t.now()
		t.reads.Add(1)
		states, err := ReadStatesOf(ctx, t.pool, namespaces)
		cancel()
		ended := t.now()
		t.mu.Lock()
		if err == nil {
			// A failed read leaves the facts to age: a Load then reads its
			// namespace alone, and meets the failure itself.
			for ns, st := range states {
				if e := t.entries[ns]; e != nil && began.After(e.began) {
					e.state, e.began, e.ended = st, began, ended
				}
			}
		}
		t.round = nil
		t.mu.Unlock()
		close(rd.done)
		tick.Reset(t.refresh / 2)
	}
}

// bounded gives ctx a deadline of d unless it has one.
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
