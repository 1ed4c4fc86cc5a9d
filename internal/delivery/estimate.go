package delivery

import (
	"math"
	"time"
)

// The estimator's constants. They were tuned against the fake third party's
// unannounced limit (bare 429s beyond it) at 20 requests/s with a burst of
// 2 and 20, 200 requests/s with a burst of 10, and 5 requests/s (a
// tenant's account, issue 43) with a burst of 1 and 5, 4 requests in flight:
// see TestEstimator* and the bench's cold start, fast limit and unknown
// limit rows.
const (
	// rateFloor is the least a bare 429 lowers the rate to, in requests/s.
	rateFloor = 0.1
	// startMin is the least rate slow start begins from, in requests/s.
	startMin = 1.0
	// decreaseFactor is the multiplicative decrease of a bare 429 once the
	// limit is known: gentle, since the rate it came at is remembered and
	// not probed past quickly.
	decreaseFactor = 0.9
	// decreaseSpacing is the least time between two decreases: the 429s of
	// one overshoot (requests in flight, a window that has not reset yet)
	// are one signal, not several.
	decreaseSpacing = time.Second
	// growEvery is slow start's window: the rate doubles once per window
	// in which it was used and nothing was refused.
	growEvery = time.Second
	// measureSpan is how far back the accepted rate is measured when a 429
	// comes; minSpan the least span that means something. Over less, a
	// third party's burst (the requests it lets through at once before its
	// rate applies) weighs more than its rate: the first 429 of a fresh
	// client comes when a burst of 2 was accepted in 5 ms.
	measureSpan = 2 * time.Second
	minSpan     = time.Second
	// probeSpan is how far back the accepted rate is measured when a probe
	// past the ceiling is refused: long enough that the burst the probe
	// drained weighs little, and that a probe which found more than the
	// ceiling shows it.
	probeSpan = 8 * time.Second
	// burstHiding: a burst that holds this long at the limit's rate hides
	// a probe's overshoot for seconds (a bucket of 5 at 5/s: 11 s at 0.45
	// request/s over it).
	burstHiding = 500 * time.Millisecond
	// approachShare: after a decrease the rate climbs back quickly to
	// this share of the ceiling (the rate at which the 429s began), then
	// probes past it.
	approachShare = 0.97
	// probeShare and probeMin are the probe's first pace past the ceiling:
	// per second, probeShare of the rate, at least probeMin requests/s.
	// probeMin weighs at low rates only (under 5 requests/s): 0.2 took a
	// 5/s account past its limit every 3 s, 7% of its requests refused.
	probeShare = 0.02
	probeMin   = 0.1
	// probeDoubling: the probe's pace doubles after each such span without
	// a 429, so a ceiling set too low (or a limit that went back up) is
	// left behind in seconds, while a steady limit, refused within a
	// second or two of passing it, is probed at the first pace only.
	probeDoubling = 2 * time.Second
	// probeMaxDoublings bounds the probe's pace at probeShare × 2^6: 128%
	// of the rate a second, about slow start's.
	probeMaxDoublings = 6
	// probeHoldRequests is how many requests the rate holds near the
	// ceiling before it probes past it: 25 keeps a steady limit's 429s
	// under one in 25 requests (issue 43: at most 5% of a 5/s account's
	// requests), 5 s at 5/s and 0.125 s at 200/s.
	probeHoldRequests = 25
	// usedShare: a rate is raised only while the requests of the last
	// second used this share of it; a quiet exporter proves nothing.
	usedShare = 0.8
	// holdRefusals: this many 429s of requests sent while slow start holds
	// its rate show the overshoot is real, not a stray, without holding a
	// whole second at up to twice the limit.
	holdRefusals = 3
	// idleGap: while nothing is learnt, a gap this long between two
	// requests starts the measure afresh: an exporter that was idle did
	// not learn how much the third party takes. A tenant taking turns in
	// a busy lane sends every 0.2 to 0.4 s without being idle: at 250 ms
	// its first 429 came "too early to measure", and slow start doubled
	// it past its limit, late in a drain (issue 43).
	idleGap = time.Second
)

// ratePhase is where the estimator stands.
type ratePhase int

const (
	// phaseUnlimited: nothing refused yet; no rate learnt.
	phaseUnlimited ratePhase = iota
	// phaseSlowStart: a 429 came before anything could be measured; the
	// rate doubles per growEvery until the next 429, which sets the
	// ceiling.
	phaseSlowStart
	// phaseProbe: the ceiling is known; the rate holds near it and probes
	// past it slowly, faster the longer nothing is refused.
	phaseProbe
)

func (p ratePhase) String() string {
	switch p {
	case phaseSlowStart:
		return "slow start"
	case phaseProbe:
		return "probing"
	}
	return "unlimited"
}

// estimator learns the rate a third party allows when it says so only with
// bare 429s (no Retry-After, no quota). Its clock is its callers': every
// method takes the time, so a test can script answers without sleeping.
// It is not safe for concurrent use; the pacer holds it under its mutex.
//
// How it learns, as TCP's congestion control does:
//   - Unlimited until the first 429. If the requests before it span
//     minSpan at least, what was accepted over the last measureSpan is
//     the ceiling. If not (the usual case: a fresh client's first burst is
//     refused within milliseconds), no ceiling is set: slow start begins
//     at what was accepted in the last second.
//   - Slow start doubles the rate per growEvery while it is used and
//     nothing is refused. A 429 within minSpan of its beginning halves the
//     rate and slow start goes on. A later one holds the rate, to measure
//     what gets through at it: holdRefusals more 429s (or one, minSpan
//     into the hold) set the ceiling to the rate held times the share of
//     the requests sent during the hold that were accepted (past its
//     burst, a token bucket takes its rate of what comes at a higher one),
//     and to at least the last rate used for a whole window without a
//     429; a window without one (the 429 was a stray: requests bunched on
//     their way) lets slow start go on doubling. What was accepted before
//     the hold measures the client's own pace, not the third party's.
//   - With a ceiling, a 429 sets it to the rate it came at, or to what was
//     accepted over the last measureSpan when that is lower, and lowers
//     the rate multiplicatively from there; accepted requests raise it
//     back quickly to approachShare of the ceiling, hold it there
//     probeHoldRequests, then probe past it, the probe's pace doubling
//     every probeDoubling without a 429.
//   - Unless the third party's burst is small (burstHides), what was
//     accepted over the last measureSpan overstates its rate: a probe past
//     the ceiling drains the burst before its first 429 (a bucket of 5 at
//     5/s lets a probe reach 7 to 10/s first). A probe refused then keeps
//     the ceiling it had, raised only by what was accepted since the last
//     429 (the bucket empty at both ends: at most its rate) or over the
//     last probeSpan less the burst; a 429 below the ceiling lowers it to
//     what was accepted since the last 429, by decreaseFactor at most.
type estimator struct {
	max float64 // Config.RateLimit; +Inf when none

	phase   ratePhase
	learned float64 // +Inf while unlimited
	ceiling float64 // where the last 429s began; 0 unknown
	// good is, in slow start, the last rate used for a whole window
	// without a 429: the limit is at least that.
	good float64
	// since is when measuring began: the first request, the beginning of
	// slow start, or the adoption of another daemon's rate.
	since        time.Time
	lastSent     time.Time
	grownAt      time.Time // slow start's last doubling (or its beginning)
	heldAt       time.Time // slow start holds its rate since; zero: not held
	heldOK       int       // requests sent during the hold: accepted
	heldRefused  int       // and answered 429
	lastRefused  time.Time // the last 429 that slow start took in
	probeFrom    time.Time // when the probe past the ceiling began
	lastDecrease time.Time
	lastIncrease time.Time
	sentWin      window
	acceptedWin  window
	// accepted counts every accepted request; refusedAt is the last 429
	// and acceptedAt the count then. A 429 says the third party's bucket
	// was empty, so what was accepted between two 429s is at most its
	// rate over that span, whatever its burst.
	acceptedN, acceptedAt int
	refusedAt             time.Time
	// firstAccepted were accepted over firstSpan before a fresh client's
	// first 429 (none: firstSpan zero): they tell the third party's burst
	// once its rate is known.
	firstAccepted int
	firstSpan     time.Duration
}

func newEstimator(limit float64) *estimator {
	e := &estimator{max: math.Inf(1), learned: math.Inf(1)}
	if limit > 0 {
		e.max = limit
	}
	return e
}

// rateStep is a change of the learnt rate.
type rateStep struct {
	changed bool
	from    float64
	cause   string
	// found is set when this step set the ceiling after slow start or
	// from unlimited: the third party's limit was found.
	found bool
}

// sent notes a request going out.
func (e *estimator) sent(now time.Time) {
	if e.since.IsZero() || (e.phase == phaseUnlimited && now.Sub(e.lastSent) > idleGap) {
		e.since = now
	}
	e.lastSent = now
	e.sentWin.add(now)
}

// measured is the accepted rate over the last measureSpan (less when
// measuring began later), and whether that span means something: long
// enough, and, once the ceiling is known, with the rate used (an exporter
// that was quiet measured its own pace, not the third party's; slow start
// doubles only a rate in use).
func (e *estimator) measured(now time.Time) (float64, bool) {
	span := min(measureSpan, now.Sub(e.since))
	if e.since.IsZero() || span < minSpan {
		return 0, false
	}
	secs := span.Seconds()
	if e.phase == phaseProbe && float64(e.sentWin.count(now, span))/secs < usedShare*e.learned {
		return 0, false
	}
	return float64(e.acceptedWin.count(now, span)) / secs, true
}

// accepted notes an accepted request sent at sentAt, and raises the
// learnt rate while it is in use.
func (e *estimator) accepted(now, sentAt time.Time) rateStep {
	e.acceptedWin.add(now)
	e.acceptedN++
	if !e.heldAt.IsZero() && !sentAt.Before(e.heldAt) {
		e.heldOK++
	}
	if e.phase == phaseUnlimited || e.learned >= e.max {
		return rateStep{}
	}
	gap := now.Sub(e.lastIncrease)
	dt := min(gap, time.Second).Seconds()
	if dt <= 0 {
		return rateStep{}
	}
	e.lastIncrease = now
	if float64(e.sentWin.count(now, time.Second)) < usedShare*e.learned {
		// The hold and the probe count time in use: a tenant that waited
		// its turn (a loaded daemon) did not probe, and would otherwise
		// come back probing at a pace doubled meanwhile, into a bucket
		// refilled meanwhile.
		e.probeFrom = e.probeFrom.Add(gap)
		return rateStep{}
	}
	var next float64
	cause := "accepted requests"
	switch {
	case e.phase == phaseSlowStart:
		if now.Sub(e.grownAt) < growEvery || now.Sub(e.lastRefused) < growEvery {
			return rateStep{}
		}
		// A window without a 429, holding or not: the rate is good.
		e.heldAt = time.Time{}
		e.good, e.grownAt = e.learned, now
		next = 2 * e.learned
		cause = "nothing refused for " + growEvery.String() + " (slow start)"
	case e.learned < approachShare*e.ceiling:
		// Back near where the 429s began, about as fast as it was left.
		slope := max(probeMin, e.ceiling-e.learned)
		next = min(e.learned+slope*dt, approachShare*e.ceiling)
		if next >= approachShare*e.ceiling {
			e.probeFrom = now
		}
	default:
		// Near the ceiling, hold for probeHoldRequests before probing
		// past it: at a low rate the probe's 429 otherwise comes every
		// dozen requests.
		hold := time.Duration(float64(probeHoldRequests) / e.learned * float64(time.Second))
		since := now.Sub(e.probeFrom) - hold
		if since < 0 {
			return rateStep{}
		}
		doublings := min(int(since/probeDoubling), probeMaxDoublings)
		slope := min(max(probeMin, probeShare*e.learned)*math.Ldexp(1, doublings), e.learned)
		next = e.learned + slope*dt
	}
	return e.set(min(next, e.max), cause)
}

// refused notes a bare 429 for a request sent at sentAt, and lowers the
// learnt rate.
func (e *estimator) refused(now, sentAt time.Time) rateStep {
	between, betweenOK := e.betweenRefusals(now)
	e.refusedAt, e.acceptedAt = now, e.acceptedN
	if sentAt.Before(e.lastDecrease) || now.Sub(e.lastDecrease) < decreaseSpacing {
		return rateStep{} // part of an overshoot already answered
	}
	est, meaningful := e.measured(now)
	var next float64
	var found bool
	cause := "429 without Retry-After"
	switch {
	case e.phase == phaseUnlimited && !meaningful, e.phase == phaseSlowStart && now.Sub(e.since) < minSpan:
		// Too early to say where the limit is: (re)start slow.
		if e.phase == phaseUnlimited {
			next = max(float64(e.acceptedWin.count(now, time.Second)), startMin)
			cause += ", too early to measure: slow start"
			// What a fresh client got through before its first 429 is
			// the third party's burst and its rate over that span.
			e.firstAccepted, e.firstSpan = e.acceptedWin.count(now, time.Second), now.Sub(e.since)
		} else {
			next = e.learned / 2
			cause += ", early in slow start: halved"
		}
		e.phase, e.ceiling = phaseSlowStart, 0
		e.good, e.since, e.grownAt, e.heldAt, e.lastRefused = 0, now, now, time.Time{}, time.Time{}
	case e.phase == phaseSlowStart && e.heldAt.IsZero():
		// Hold the rate, to measure what gets through at it.
		e.heldAt, e.lastRefused, e.heldOK, e.heldRefused = now, now, 0, 0
		return rateStep{}
	case e.phase == phaseSlowStart:
		e.lastRefused = now
		if !sentAt.Before(e.heldAt) {
			e.heldRefused++
		}
		if e.heldRefused < holdRefusals && now.Sub(e.heldAt) < minSpan {
			return rateStep{}
		}
		share := float64(e.heldOK) / float64(max(e.heldOK+e.heldRefused, 1))
		e.phase, e.ceiling, found = phaseProbe, max(e.learned*share, e.good, startMin), true
		e.heldAt = time.Time{}
		next = e.ceiling * decreaseFactor
		cause += ", limit found"
	case e.phase == phaseUnlimited:
		// The first 429 after a span long enough: the limit lies where
		// what was accepted says.
		e.phase, e.ceiling, found = phaseProbe, max(est, startMin), true
		next = e.ceiling * decreaseFactor
		cause += ", limit found"
	default:
		// Remember where the 429s began, to come back near it quickly and
		// past it only slowly.
		old := e.ceiling
		e.ceiling = e.learned
		if meaningful && est > 0 {
			// What got through is where the limit lies: the rate the
			// 429s began at is past it, and coming back near that would
			// be refused again before the probe began.
			e.ceiling = min(e.ceiling, est)
		}
		switch {
		case !betweenOK || !e.burstHides(old):
			// A burst that hides nothing: what got through over the
			// last measureSpan is the limit.
		case e.learned > old:
			// The probe past the ceiling was refused: the limit is
			// where it was, or higher by what got through since the
			// last 429 or over the last probeSpan. Over the last
			// measureSpan a burst the probe drained counts as rate (a
			// bucket of 5 at 5/s: up to 7.5/s over 2 s); since the
			// last 429 it does not.
			e.ceiling = min(e.ceiling, max(old, between, e.probed(now, old)))
		default:
			// Refused below the ceiling: the limit came down, or the
			// ceiling was set past it; at most by decreaseFactor a 429
			// from what got through since the last one.
			e.ceiling = min(e.ceiling, max(between, decreaseFactor*old, rateFloor))
		}
		next = e.ceiling * decreaseFactor
	}
	e.lastDecrease, e.lastIncrease = now, now
	st := e.set(min(max(next, rateFloor), e.max), cause)
	st.found = found
	return st
}

// burst is the third party's burst as a fresh client's first 429 told
// it, at a limit of ceiling; false when none told it.
func (e *estimator) burst(ceiling float64) (float64, bool) {
	if e.firstSpan <= 0 {
		return 0, false
	}
	return max(float64(e.firstAccepted)-ceiling*e.firstSpan.Seconds(), 0), true
}

// burstHides says whether the third party's burst, at a limit of
// ceiling, can hide a probe's overshoot for a while: it is unknown, or
// holds burstHiding of the rate. A small one (a burst of 1 or 2 at 5 or
// 20/s) hides nothing: the rate a probe is refused at is the limit.
func (e *estimator) burstHides(ceiling float64) bool {
	b, ok := e.burst(ceiling)
	return !ok || b >= burstHiding.Seconds()*ceiling
}

// probed is the accepted rate over the last probeSpan (or since the
// measure began, when that is shorter), less the burst a probe drained:
// 0 when the burst is unknown.
func (e *estimator) probed(now time.Time, ceiling float64) float64 {
	span := min(probeSpan, now.Sub(e.since))
	b, ok := e.burst(ceiling)
	if span < minSpan || !ok {
		return 0
	}
	return (float64(e.acceptedWin.count(now, span)) - b) / span.Seconds()
}

// betweenRefusals is the accepted rate since the last 429, and whether
// that span (measureSpan at least) means something.
func (e *estimator) betweenRefusals(now time.Time) (float64, bool) {
	span := now.Sub(e.refusedAt)
	if e.refusedAt.IsZero() || span < measureSpan {
		return 0, false
	}
	return float64(e.acceptedN-e.acceptedAt) / span.Seconds(), true
}

// adopt takes a rate learnt by another daemon, when this one has learnt
// nothing yet: with a ceiling it probes from there, without one slow start
// goes on from the rate.
func (e *estimator) adopt(now time.Time, learned, ceiling float64) bool {
	if e.phase != phaseUnlimited {
		return false
	}
	e.learned = min(max(learned, rateFloor), e.max)
	e.ceiling = ceiling
	e.phase = phaseProbe
	if ceiling <= 0 {
		e.phase, e.ceiling, e.good = phaseSlowStart, 0, e.learned
	}
	e.since, e.grownAt, e.probeFrom, e.lastIncrease = now, now, now, now
	return true
}

func (e *estimator) set(next float64, cause string) rateStep {
	st := rateStep{changed: next != e.learned, from: e.learned, cause: cause}
	e.learned = next
	return st
}

// window counts events of the last probeSpan in 100 ms buckets.
type window struct {
	buckets [probeSpan / windowBucket]struct {
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

// count counts the events of the last span (at most the window's
// probeSpan), in whole buckets.
func (w *window) count(now time.Time, span time.Duration) int {
	slot := now.UnixNano() / int64(windowBucket)
	last := min(int64(span/windowBucket), int64(len(w.buckets)))
	n := 0
	for _, b := range w.buckets {
		if b.slot > slot-last && b.slot <= slot {
			n += b.n
		}
	}
	return n
}
