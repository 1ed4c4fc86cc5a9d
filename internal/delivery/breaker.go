package delivery

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// BreakerName is the circuit breaker's name.
const BreakerName = "thirdparty"

// breaker is this process's circuit breaker, its state mirrored to the
// store.
//
// Why not gobreaker's DistributedCircuitBreaker: its Execute reads the
// shared state, takes the store's mutex, and holds that mutex for the whole
// request, so requests through it run one at a time; a no-op mutex would
// let concurrent requests overwrite each other's counts and even undo a
// trip (one request injects the "closed" state it read before another
// tripped the breaker). So each process counts with gobreaker's
// TwoStepCircuitBreaker, which is safe for concurrent requests, and the
// store gets only what another daemon must know at a lock handover: the
// state, and until when an open breaker stays open.
//
// A daemon inherits another's breaker as it stands (issue 22): open, it
// sends nothing before its expiry (the fence); then, or at once when it
// was found half-open or open past its expiry, it is half-open: exactly
// one request probes. A probe that fails opens it again for
// BreakerOpenTimeout; one that succeeds closes it, and this process's own
// breaker counts from there. The period running out never closes it: the
// third party was failing when it was last seen. gobreaker's state cannot
// be set from outside, so the inherited half-open and open states are kept
// here, before gobreaker is asked.
type breaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	timeout time.Duration
	now     func() time.Time

	mu         sync.Mutex
	openUntil  time.Time // expiry of this process's open breaker
	fence      time.Time // expiry of an inherited open breaker
	inherited  bool      // an inherited breaker stands: after the fence, one probe
	probing    bool      // the inherited breaker's probe is under way
	adopted    breakerstore.Breaker
	written    breakerstore.Breaker // what this process last stored
	generation uint64
	pending    []transition // to log and store, outside gobreaker's mutex
	stale      bool         // the store shows a state this process has left
	settled    chan struct{}

	// The fast path of a request through a closed breaker of this process's
	// own: each flag is set, under mu, while the state it names needs mu,
	// so a request takes mu only then. Requests go 16 at a time and more,
	// and would otherwise take turns at mu three times each.
	//
	//   - special: a fence or an inherited breaker stands (allow);
	//   - watching: settled was handed out since it was made (the report
	//     closes it then, and only then);
	//   - dirty: transitions are pending or the store is stale.
	special, watching, dirty atomic.Bool
}

type transition struct {
	from, to   gobreaker.State
	generation uint64
	expiry     time.Time
}

// errProbing is what a request meets while the half-open breaker's single
// probe is under way.
var errProbing = errors.New("delivery: circuit breaker probe under way")

func newBreaker(failures int, timeout time.Duration, now func() time.Time) *breaker {
	b := &breaker{timeout: timeout, now: now, settled: make(chan struct{})}
	limit := uint32(failures)
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        BreakerName,
		MaxRequests: 1,
		Timeout:     timeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= limit },
		IsExcluded:  func(err error) bool { return errors.Is(err, errNotCounted) },
		// Called under gobreaker's mutex: note it, act on it later.
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.generation++
			t := transition{from: from, to: to, generation: b.generation}
			if to == gobreaker.StateOpen {
				b.openUntil = b.now().Add(b.timeout)
				t.expiry = b.openUntil
			}
			b.pending = append(b.pending, t)
			b.dirty.Store(true)
		},
	})
	return b
}

// allow asks whether a request may go. It returns the function to report
// the request's error with (nil: success; errNotCounted: says nothing of
// the third party's health), or a *WaitError wrapping ErrBreakerOpen, or
// errProbing.
func (b *breaker) allow() (func(error), error) {
	now := b.now()
	if b.special.Load() {
		if done, err, ok := b.allowSpecial(now); ok {
			return done, err
		}
	}
	done, err := b.cb.Allow()
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		b.mu.Lock()
		until := b.openUntil
		b.mu.Unlock()
		return nil, &WaitError{Err: ErrBreakerOpen, Wait: max(until.Sub(now), minBreakerWait)}
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, errProbing
	case err != nil:
		return nil, err
	}
	return func(err error) {
		done(err)
		if b.watching.Load() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.settleLocked()
		}
	}, nil
}

// allowSpecial is allow while a fence or an inherited breaker stands: ok
// says it decided, else gobreaker is asked.
func (b *breaker) allowSpecial(now time.Time) (done func(error), err error, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.flagLocked()
	if b.fence.After(now) {
		return nil, &WaitError{Err: ErrBreakerOpen, Wait: b.fence.Sub(now)}, true
	}
	if !b.inherited {
		// Another daemon's open period is over: nothing stands any more.
		b.fence = time.Time{}
		return nil, nil, false
	}
	if b.probing {
		return nil, errProbing, true
	}
	b.probing = true
	if !b.fence.IsZero() {
		// The inherited open period ended: half-open, said once.
		b.fence = time.Time{}
		b.generation++
		b.pending = append(b.pending, transition{from: gobreaker.StateOpen, to: gobreaker.StateHalfOpen, generation: b.generation})
	}
	return b.probed, nil, true
}

// flagLocked sets the fast path's flags from the state they stand for.
func (b *breaker) flagLocked() {
	b.special.Store(!b.fence.IsZero() || b.inherited)
	b.dirty.Store(len(b.pending) > 0 || b.stale)
}

// probed reports the inherited breaker's probe: a success closes it, a
// counted failure opens it for the open period, anything else (a 429, a
// refusal) leaves it half-open for the next request to probe.
func (b *breaker) probed(err error) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.flagLocked()
	b.probing = false
	switch {
	case err == nil:
		b.inherited = false
		b.generation++
		b.pending = append(b.pending, transition{from: gobreaker.StateHalfOpen, to: gobreaker.StateClosed, generation: b.generation})
	case errors.Is(err, errNotCounted):
	default:
		b.fence = now.Add(b.timeout)
		b.generation++
		b.pending = append(b.pending, transition{from: gobreaker.StateHalfOpen, to: gobreaker.StateOpen, generation: b.generation, expiry: b.fence})
	}
	b.settleLocked()
}

func (b *breaker) settleLocked() {
	if !b.watching.Load() {
		return // nobody holds the channel: closing it would wake no one
	}
	close(b.settled)
	b.settled = make(chan struct{})
	b.watching.Store(false)
}

// minBreakerWait is the least wait returned for an open breaker.
const minBreakerWait = 100 * time.Millisecond

// waitSettled returns a channel closed when the next request through the
// breaker has been reported.
func (b *breaker) waitSettled() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watching.Store(true)
	return b.settled
}

// adopt takes what the store says. Another daemon's breaker, open or
// half-open, is inherited as it stands when this process's own is closed:
// it reports true then. Otherwise another daemon's open breaker fences this
// one until its expiry, and a state this process has left is to be
// overwritten at the next transition or success.
func (b *breaker) adopt(stored breakerstore.Breaker) bool {
	now := b.now()
	local := b.cb.State()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.flagLocked()
	if sameBreaker(stored, b.written) || sameBreaker(stored, b.adopted) {
		return false // this process's own, or taken already
	}
	if local == gobreaker.StateClosed && !b.inherited && stored.Current(now) != gobreaker.StateClosed {
		b.adopted, b.inherited = stored, true
		b.fence = stored.OpenUntil(now) // zero: half-open now
		b.generation = max(b.generation, stored.Generation)
		return true
	}
	if until := stored.OpenUntil(now); !until.IsZero() {
		if local != gobreaker.StateOpen {
			b.fence = until
		}
		return false
	}
	b.stale = stored.State != local
	return false
}

func sameBreaker(a, b breakerstore.Breaker) bool {
	return a.State == b.State && a.Generation == b.Generation && a.Expiry.Equal(b.Expiry)
}

// state is the breaker's state as this process sees it, and until when it
// stays open.
func (b *breaker) state() (gobreaker.State, time.Time) {
	now := b.now()
	b.mu.Lock()
	fence, inherited := b.fence, b.inherited
	b.mu.Unlock()
	switch {
	case fence.After(now):
		return gobreaker.StateOpen, fence
	case inherited:
		return gobreaker.StateHalfOpen, time.Time{}
	}
	st := b.cb.State()
	if st != gobreaker.StateOpen {
		return st, time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return st, b.openUntil
}

// transitions takes the state changes not yet acted on, and, when the
// store shows a state this process has left and nothing changed since, the
// current state to overwrite it with.
func (b *breaker) transitions() []transition {
	if !b.dirty.Load() {
		return nil
	}
	local := b.cb.State()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.flagLocked()
	out := b.pending
	b.pending = nil
	if len(out) == 0 && b.stale {
		out = append(out, transition{from: local, to: local, generation: b.generation, expiry: b.openUntilLocked(local)})
	}
	b.stale = false
	return out
}

func (b *breaker) openUntilLocked(st gobreaker.State) time.Time {
	if st == gobreaker.StateOpen {
		return b.openUntil
	}
	return time.Time{}
}

// breakerChanged logs, counts and stores the breaker's state changes.
func (d *Deliverer) breakerChanged(ctx context.Context) {
	ts := d.breaker.transitions()
	if len(ts) == 0 {
		return
	}
	for _, t := range ts {
		d.metrics.SetBreakerState(int(t.to))
		if t.from == t.to {
			continue
		}
		last := d.lastFailure()
		attrs := []any{slog.String("from", t.from.String()), slog.Int("status", last.Status), slog.String("last_error", last.Text)}
		switch t.to {
		case gobreaker.StateOpen:
			d.logger.WarnContext(ctx, "delivery: circuit breaker opened: the third party keeps failing; nothing is sent until a probe",
				append(attrs, slog.Duration("open_for", d.cfg.BreakerOpenTimeout))...)
		case gobreaker.StateClosed:
			d.logger.WarnContext(ctx, "delivery: circuit breaker closed: the third party answers again", slog.String("from", t.from.String()))
		default:
			d.logger.InfoContext(ctx, "delivery: circuit breaker half-open: one probe goes", attrs...)
		}
	}
	if d.store == nil {
		return
	}
	t := ts[len(ts)-1]
	wctx, cancel := d.writeContext(ctx)
	defer cancel()
	stored := breakerstore.Breaker{State: t.to, Generation: t.generation, Expiry: t.expiry}
	if err := d.store.SetBreaker(wctx, stored); err != nil {
		d.logger.WarnContext(ctx, "delivery: record the circuit breaker's state", slog.String("error", err.Error()))
		return
	}
	d.breaker.wrote(stored)
}

// wrote notes what this process stored, so that reading it back is not
// taken for another daemon's breaker.
func (b *breaker) wrote(stored breakerstore.Breaker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written = stored
}
