package delivery

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// rateStoreEvery is how often the learnt rate is written to the store.
const rateStoreEvery = 2 * time.Second

// pacer decides when the next request may go. One rate.Limiter paces every
// request at the lowest of three rates: Config.RateLimit; the rate learnt
// from bare 429s (the estimator: slow start, then multiplicative decrease
// and a probe, as TCP's congestion control); and the quota the third party
// advertises, spread over what remains of its window.
type pacer struct {
	limiter *rate.Limiter
	max     float64 // Config.RateLimit; +Inf when none
	now     func() time.Time
	// open is set, under mu, while no rate applies and no quota window is
	// known: a request then asks neither the limiter nor the quota, and
	// takes mu only to count itself (sent, succeeded).
	open atomic.Bool

	mu          sync.Mutex
	est         *estimator
	quotaUntil  time.Time // end of the quota's window; zero: no quota known
	quotaBudget int       // requests left in it, as far as we can tell
	logged      float64   // the learnt rate last logged
	storedAt    time.Time
	stored      float64
	// yielded is the share of the rate a `syncer verify` from the command
	// line takes now (breakerstore.VerifyShare): this pacer sends at the
	// rest, so the two together stay within the limit.
	yielded float64
	// lowered is closed, and replaced, when the learnt rate goes down: a
	// request that waits for a token given at the rate before takes one
	// at the new rate instead. Otherwise the requests already waiting go
	// at the rate a 429 just refused, into a bucket it said was empty
	// (issue 43: two or three 429s a probe at a 5/s account).
	lowered chan struct{}
	// takenAt is the latest time handed to the limiter (a reservation's
	// or a change of its rate): a token is never taken before it, which
	// would give the limiter time it already counted.
	takenAt time.Time
	// waiters are the requests waiting for their tokens that may be
	// withdrawn (withdraw.go).
	waiters []*waiter
}

// lateShare is how late, in intervals of the rate, a request may take the
// token it was due, on the rate's timeline instead of its own. Without
// it a request late by a few milliseconds (a loaded machine's timer, the
// record's transaction before it) took its token then, the next one was
// due an interval after that, and the lateness was lost for good: 8
// tenants at 4 requests/s each got 3.57 to 3.75/s under CI's load (issue
// 54, contract 10.1's 3.6). Two requests are then at least 4/5 of an
// interval apart, and the rate over any window is the configured one
// plus a fifth of a request.
const lateShare = 0.2

func newPacer(limit float64, burst int, now func() time.Time) *pacer {
	p := &pacer{max: math.Inf(1), logged: math.Inf(1), stored: math.Inf(1), now: now, est: newEstimator(limit), lowered: make(chan struct{})}
	if limit > 0 {
		p.max = limit
	}
	p.limiter = rate.NewLimiter(toLimit(p.max), burst)
	p.applyLocked(now())
	return p
}

func toLimit(r float64) rate.Limit {
	if math.IsInf(r, 1) {
		return rate.Inf
	}
	return rate.Limit(r)
}

// rateChange is what a change of the learnt rate means for the caller.
type rateChange struct {
	changed bool
	from    float64
	learned float64
	ceiling float64
	phase   ratePhase
	limit   float64 // what the limiter allows now; 0 none
	log     bool    // moved by more than half since last logged
	store   bool    // due for the store
	found   bool    // the third party's limit was found (a ceiling set)
	cause   string
}

// limit is the rate the limiter allows now, in requests/s; 0 means none.
func (p *pacer) limit() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return finite(p.applyLocked(p.now()))
}

// applyLocked sets the limiter to the lowest of the three rates.
func (p *pacer) applyLocked(now time.Time) float64 {
	r := min(p.max, p.est.learned)
	if p.yielded > 0 && !math.IsInf(r, 1) {
		r *= 1 - p.yielded
	}
	if left := p.quotaUntil.Sub(now); left > 0 && p.quotaBudget > 0 {
		r = min(r, float64(p.quotaBudget)/left.Seconds())
	}
	if toLimit(r) != p.limiter.Limit() {
		p.limiter.SetLimitAt(p.advanceLocked(now), toLimit(r))
	}
	p.open.Store(math.IsInf(r, 1) && !p.quotaUntil.After(now))
	return r
}

// yield sets the share of the rate a command line verify takes (0: none),
// and reports whether it changed.
func (p *pacer) yield(share float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if share == p.yielded {
		return false
	}
	more := share > p.yielded
	p.yielded = share
	p.applyLocked(p.now())
	if more {
		// As for a lower learnt rate: the requests already waiting take
		// their tokens at the rate left to the export.
		close(p.lowered)
		p.lowered = make(chan struct{})
	}
	return true
}

// wait blocks until the limiter lets a request go.
func (p *pacer) wait(ctx context.Context) error { return p.waitOr(ctx, nil) }

// waitOr is wait, withdrawn (ErrWithdrawn, its token given back) when w
// signals while it waits for a token and nothing of w's batch was sent.
func (p *pacer) waitOr(ctx context.Context, w *withdrawal) error {
	sig := w.signal()
	for {
		if p.open.Load() {
			return ctx.Err()
		}
		now := p.now()
		p.mu.Lock()
		r := p.applyLocked(now)
		lowered := p.lowered
		p.mu.Unlock()
		if math.IsInf(r, 1) {
			// No rate applies: the limiter would let the request go at
			// once, after its lock and a look at the clock.
			return ctx.Err()
		}
		p.mu.Lock()
		res := p.reserveLocked(now)
		p.mu.Unlock()
		if !res.OK() {
			return p.limiter.Wait(ctx) // its error: the burst is 0
		}
		delay := res.DelayFrom(now)
		if delay <= 0 {
			return nil
		}
		var wt *waiter
		if sig != nil {
			wt = p.addWaiter(res, w, now.Add(delay))
		}
		t := time.NewTimer(delay)
	waiting:
		for {
			select {
			case <-t.C:
				if !p.dropWaiter(wt) {
					return ErrWithdrawn // at its token, its token given back
				}
				return nil
			case <-ctx.Done():
				t.Stop()
				if p.dropWaiter(wt) {
					p.cancel(res)
				}
				return ctx.Err()
			case <-lowered:
				t.Stop()
				if !p.dropWaiter(wt) {
					return ErrWithdrawn
				}
				p.cancel(res)
				break waiting
			case <-sig:
				p.withdrawWaiters(sig)
				if !p.dropWaiter(wt) {
					t.Stop()
					return ErrWithdrawn
				}
				// Another request of the batch is being sent: this
				// one goes too, at its token.
				sig = nil
			}
		}
	}
}

// reserveLocked takes a token for a request at now: at the time it was
// due when that is at most lateShare of an interval ago (and after every
// time the limiter was given), else at now.
func (p *pacer) reserveLocked(now time.Time) *rate.Reservation {
	at := now
	if l := p.limiter.Limit(); l != rate.Inf && l > 0 {
		at = now.Add(-time.Duration(lateShare / float64(l) * float64(time.Second)))
	}
	if at.Before(p.takenAt) {
		at = p.takenAt
	}
	p.takenAt = at
	return p.limiter.ReserveN(at, 1)
}

// cancel gives back a token a request did not use.
func (p *pacer) cancel(res *rate.Reservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	res.CancelAt(p.advanceLocked(p.now()))
}

// advanceLocked is the time to hand the limiter for now: never before a
// time it was given.
func (p *pacer) advanceLocked(now time.Time) time.Time {
	if now.Before(p.takenAt) {
		now = p.takenAt
	}
	p.takenAt = now
	return now
}

// peek is how long a request would wait for its token now, without
// taking it; ok is false when no request can ever go (a burst of 0).
func (p *pacer) peek(now time.Time) (wait time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := p.reserveLocked(now)
	if !res.OK() {
		return 0, false
	}
	wait = res.DelayFrom(now)
	// Given back as of the time it was taken at, so that it comes back
	// whole even when it was due in the past.
	res.CancelAt(p.takenAt)
	return max(wait, 0), true
}

// sent records a request going out and returns its time.
func (p *pacer) sent() time.Time {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.est.sent(now)
	if p.quotaUntil.After(now) {
		p.quotaBudget--
		p.applyLocked(now)
	}
	return now
}

// quotaUsed reports the end of the quota's window when nothing of it is
// left to spend.
func (p *pacer) quotaUsed() (time.Time, bool) {
	if p.open.Load() {
		return time.Time{}, false
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quotaUntil.After(now) && p.quotaBudget <= 0 {
		return p.quotaUntil, true
	}
	return time.Time{}, false
}

// observeQuota takes an answer's quota in. others is how many other
// requests are unanswered: they may already count against what remains.
// It reports the end of the window when the answer says nothing remains,
// for a pause every daemon honours.
//
// Within one window the earliest reset any answer implies is kept: a reset
// said in whole seconds rounded up (as the draft asks) is an upper bound of
// the real one, so the earliest bound is the tightest, and resuming there
// is neither early nor a second late.
func (p *pacer) observeQuota(q thirdparty.Quota, others int) (time.Time, bool) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.applyLocked(now)
	if q.Reset <= 0 && q.Remaining > 0 {
		// A count without a window: nothing to spread it over.
		p.quotaUntil, p.quotaBudget = time.Time{}, 0
		return time.Time{}, false
	}
	until, budget := now.Add(max(q.Reset, 0)), max(q.Remaining-others, 0)
	if q.Reset <= 0 {
		until = now.Add(RetryAfterDefault) // used up, with no word of when it comes back
	}
	if p.quotaUntil.After(now) {
		// The same window: an answer that overtook a later one must not
		// give back what that one already spent.
		until, budget = minTime(until, p.quotaUntil), min(budget, p.quotaBudget)
	}
	p.quotaUntil, p.quotaBudget = until, budget
	return until, q.Remaining <= 0
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// succeeded notes an accepted request sent at sentAt, and raises the
// learnt rate while it is in use.
func (p *pacer) succeeded(sentAt time.Time) rateChange {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.setLocked(now, p.est.accepted(now, sentAt))
}

// limited notes a bare 429 (no Retry-After, no quota) for a request sent
// at sentAt, and lowers the learnt rate.
func (p *pacer) limited(sentAt time.Time) rateChange {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.setLocked(now, p.est.refused(now, sentAt))
}

// adopt takes a rate learnt by another daemon, when this one has learnt
// nothing yet.
func (p *pacer) adopt(learned, ceiling float64) bool {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.est.adopt(now, learned, ceiling) {
		return false
	}
	p.logged, p.stored, p.storedAt = p.est.learned, p.est.learned, now
	p.applyLocked(now)
	return true
}

// learnt is the learnt rate (0 none), its ceiling (0 unknown) and phase.
func (p *pacer) learnt() (float64, float64, ratePhase) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return finite(p.est.learned), p.est.ceiling, p.est.phase
}

func (p *pacer) setLocked(now time.Time, st rateStep) rateChange {
	if !st.changed && !st.found {
		return rateChange{}
	}
	next := p.est.learned
	if next < st.from {
		close(p.lowered)
		p.lowered = make(chan struct{})
	}
	ch := rateChange{changed: true, from: st.from, learned: next, ceiling: p.est.ceiling, phase: p.est.phase, found: st.found, cause: st.cause}
	ch.limit = finite(p.applyLocked(now))
	if math.IsInf(p.logged, 1) || math.Abs(next-p.logged) > p.logged/2 {
		ch.log, p.logged = true, next
	}
	if (ch.log || st.found || now.Sub(p.storedAt) >= rateStoreEvery) && next != p.stored {
		ch.store, p.stored, p.storedAt = true, next, now
	}
	return ch
}

// finite is r with "no limit" as 0, the way metrics and the store say it.
func finite(r float64) float64 {
	if math.IsInf(r, 1) {
		return 0
	}
	return r
}

func rateText(r float64) string {
	if math.IsInf(r, 1) || r == 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "/s"
}
