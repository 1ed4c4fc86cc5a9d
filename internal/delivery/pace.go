package delivery

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// The rate control's constants. They were tuned against the fake third
// party's unannounced limit (20 requests/s, bare 429 beyond, 4 requests in
// flight): see BenchmarkUnannouncedLimit.
const (
	// rateFloor is the least a bare 429 lowers the rate to, in requests/s.
	rateFloor = 0.1
	// decreaseFactor is the multiplicative decrease of a bare 429: gentle,
	// since the rate it came at is remembered and not probed past quickly.
	decreaseFactor = 0.9
	// decreaseSpacing is the least time between two decreases: the 429s of
	// one overshoot (requests in flight, a window that has not reset yet)
	// are one signal, not several.
	decreaseSpacing = time.Second
	// approachShare: after a decrease the rate climbs back quickly to
	// this share of the rate at which the 429s began, then probes slowly.
	approachShare = 0.97
	// probeShare and probeMin are the slow additive probe past the rate at
	// which 429s began: per second, probeShare of the rate, at least
	// probeMin requests/s.
	probeShare = 0.02
	probeMin   = 0.2
	// startShare is the probe when no such rate is known: per second, this
	// share of the rate.
	startShare = 0.1
	// usedShare: a rate is raised only while the requests of the last
	// second used this share of it; a quiet exporter proves nothing.
	usedShare = 0.8
	// rateStoreEvery is how often the learnt rate is written to the store.
	rateStoreEvery = 2 * time.Second
)

// pacer decides when the next request may go. One rate.Limiter paces every
// request at the lowest of three rates: Config.RateLimit; the rate learnt
// from bare 429s (multiplicative decrease, additive increase, as TCP's
// congestion control); and the quota the third party advertises, spread
// over what remains of its window.
type pacer struct {
	limiter *rate.Limiter
	max     float64 // Config.RateLimit; +Inf when none
	now     func() time.Time

	mu           sync.Mutex
	learned      float64 // +Inf while nothing is learnt
	ceiling      float64 // the rate at which the last 429s began; 0 unknown
	lastDecrease time.Time
	lastIncrease time.Time
	sentWin      window
	acceptedWin  window
	quotaUntil   time.Time // end of the quota's window; zero: no quota known
	quotaBudget  int       // requests left in it, as far as we can tell
	logged       float64   // the learnt rate last logged
	storedAt     time.Time
	stored       float64
}

func newPacer(limit float64, burst int, now func() time.Time) *pacer {
	p := &pacer{max: math.Inf(1), learned: math.Inf(1), logged: math.Inf(1), stored: math.Inf(1), now: now}
	if limit > 0 {
		p.max = limit
	}
	p.limiter = rate.NewLimiter(toLimit(p.max), burst)
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
	limit   float64 // what the limiter allows now; 0 none
	log     bool    // moved by more than half since last logged
	store   bool    // due for the store
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
	r := min(p.max, p.learned)
	if left := p.quotaUntil.Sub(now); left > 0 && p.quotaBudget > 0 {
		r = min(r, float64(p.quotaBudget)/left.Seconds())
	}
	if toLimit(r) != p.limiter.Limit() {
		p.limiter.SetLimitAt(now, toLimit(r))
	}
	return r
}

// wait blocks until the limiter lets a request go.
func (p *pacer) wait(ctx context.Context) error {
	p.mu.Lock()
	p.applyLocked(p.now())
	p.mu.Unlock()
	return p.limiter.Wait(ctx)
}

// sent records a request going out and returns its time.
func (p *pacer) sent() time.Time {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sentWin.add(now)
	if p.quotaUntil.After(now) {
		p.quotaBudget--
		p.applyLocked(now)
	}
	return now
}

// quotaUsed reports the end of the quota's window when nothing of it is
// left to spend.
func (p *pacer) quotaUsed() (time.Time, bool) {
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
// learnt rate additively while it is in use.
func (p *pacer) succeeded(sentAt time.Time) rateChange {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acceptedWin.add(now)
	if math.IsInf(p.learned, 1) || p.learned >= p.max {
		return rateChange{}
	}
	dt := min(now.Sub(p.lastIncrease), time.Second).Seconds()
	p.lastIncrease = now
	if float64(p.sentWin.count(now)) < usedShare*p.learned || dt <= 0 {
		return rateChange{}
	}
	var slope float64
	switch {
	case p.ceiling <= 0:
		slope = max(probeMin, startShare*p.learned)
	case p.learned < approachShare*p.ceiling:
		// Back near where the 429s began, about as fast as it was left.
		slope = max(probeMin, p.ceiling-p.learned)
	default:
		slope = max(probeMin, probeShare*p.learned)
	}
	next := p.learned + slope*dt
	if p.learned < approachShare*p.ceiling {
		next = min(next, approachShare*p.ceiling)
	}
	return p.setLocked(now, min(next, p.max), "accepted requests")
}

// limited notes a bare 429 (no Retry-After, no quota) for a request sent
// at sentAt, and lowers the learnt rate multiplicatively: from the rate
// observed when nothing was learnt yet.
func (p *pacer) limited(sentAt time.Time) rateChange {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sentAt.Before(p.lastDecrease) || now.Sub(p.lastDecrease) < decreaseSpacing {
		return rateChange{} // part of an overshoot already answered
	}
	accepted := float64(p.acceptedWin.count(now))
	var next float64
	if math.IsInf(p.learned, 1) {
		// What got through in the last second is where the limit lies.
		p.ceiling = max(accepted, 1)
		next = p.ceiling * decreaseFactor
	} else {
		// Remember where the 429s began, to come back near it quickly and
		// past it only slowly.
		p.ceiling = p.learned
		next = p.learned * decreaseFactor
		if accepted > 0 {
			// Far above the limit, what got through is the better guess.
			next = min(next, accepted)
		}
	}
	p.lastDecrease, p.lastIncrease = now, now
	return p.setLocked(now, min(max(next, rateFloor), p.max), "429 without Retry-After")
}

// adopt takes a rate learnt by another daemon, when this one has learnt
// nothing yet.
func (p *pacer) adopt(learned, ceiling float64) bool {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !math.IsInf(p.learned, 1) {
		return false
	}
	p.learned = min(max(learned, rateFloor), p.max)
	p.ceiling = ceiling
	p.logged, p.stored, p.storedAt = p.learned, p.learned, now
	p.lastIncrease = now
	p.applyLocked(now)
	return true
}

func (p *pacer) setLocked(now time.Time, next float64, cause string) rateChange {
	ch := rateChange{changed: next != p.learned, from: p.learned, learned: next, ceiling: p.ceiling, cause: cause}
	p.learned = next
	ch.limit = finite(p.applyLocked(now))
	if math.IsInf(p.logged, 1) || math.Abs(next-p.logged) > p.logged/2 {
		ch.log, p.logged = true, next
	}
	if ch.changed && (ch.log || now.Sub(p.storedAt) >= rateStoreEvery) && next != p.stored {
		ch.store, p.stored, p.storedAt = true, next, now
	}
	return ch
}

// window counts events of the last second in ten buckets.
type window struct {
	buckets [10]struct {
		slot int64
		n    int
	}
}

const windowBucket = 100 * time.Millisecond

func (w *window) add(now time.Time) {
	slot := now.UnixNano() / int64(windowBucket)
	b := &w.buckets[slot%int64(len(w.buckets))]
	if b.slot != slot {
		b.slot, b.n = slot, 0
	}
	b.n++
}

func (w *window) count(now time.Time) int {
	slot := now.UnixNano() / int64(windowBucket)
	n := 0
	for _, b := range w.buckets {
		if b.slot > slot-int64(len(w.buckets)) && b.slot <= slot {
			n += b.n
		}
	}
	return n
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
