package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrRateLimited is Ready's reason while the rate limit (configured or
// learned) has no request to give yet.
var ErrRateLimited = errors.New("delivery: rate limit: no request may go yet")

// Ready says, without sending, how long until d would send a request:
// 0 when it would now; otherwise the wait (rate limit, 429 pause, open
// breaker) and why. A held destination (a person's pause, refused
// credentials, refused configuration) answers a positive wait and the
// reason. Safe for concurrent use; it takes no token.
//
// It is a look, not a promise: another caller may take the token first.
// An exporter that serves many tenants asks it before reading a tenant's
// rows, so a tenant at its limit or held waits without a request slot,
// and the others go on (contract section 10).
func (d *Deliverer) Ready(now time.Time) (time.Duration, error) {
	// A held tenant sends nothing, so no request reads its shared facts:
	// Ready does (at most once per loadEvery), or a person's resume (or
	// probe) would never reach the deliverer that is asked only this. One
	// not held has them read by its requests (each reads them first, at
	// most once per loadEvery): Ready reads them only once they are
	// readyLoadAfter old (it does not send), so that a sending tenant's
	// read is its request's, not the caller's look (an exporter's lane
	// asks its tenants in turn, and waited for each read: issue 54).
	if d.hold.Load() || d.held.Load() || d.loadedBefore(readyLoadAfter) {
		d.loadShared(context.Background())
	}
	if err := d.checkHold(); err != nil {
		var we *WaitError
		if errors.As(err, &we) {
			return we.Wait, we.Err
		}
		return holdWait, err
	}
	if d.held.Load() {
		d.mu.Lock()
		var wait time.Duration
		var why error
		for _, r := range []*refusal{&d.creds, &d.conf} {
			if r.state == refusalStanding {
				if w := r.until.Sub(now); w > wait {
					wait, why = w, r.err
				}
			}
		}
		if w := d.pause.until.Sub(now); w > wait {
			wait, why = w, d.pause.err
		}
		d.mu.Unlock()
		if wait > 0 {
			if why == nil {
				why = ErrPaused
			}
			return wait, why
		}
	}
	if st, until := d.breaker.state(); st == gobreaker.StateOpen {
		if wait := until.Sub(now); wait > 0 {
			return wait, ErrBreakerOpen
		}
	}
	if !d.pacer.open.Load() {
		// Reserve and cancel at once: the limiter's own answer, with its
		// token given back.
		wait, ok := d.pacer.peek(now)
		if !ok {
			return time.Second, ErrRateLimited
		}
		if wait > 0 {
			return wait, ErrRateLimited
		}
	}
	return 0, nil
}

// Paced reports whether a rate applies to the requests now (configured,
// learnt from 429s, or a quota's window): Ready's answer then moves with
// each request handed to Deliver, and a caller reading ahead of Ready
// should hand its request over before asking again.
func (d *Deliverer) Paced() bool { return !d.pacer.open.Load() }

// Rate is the rate its requests go at now, in requests/s (the lowest of
// the configured, learnt and quota's rates): 0 when none applies.
func (d *Deliverer) Rate() float64 { return d.pacer.limit() }

// readyLoadAfter is how old the shared facts of a deliverer not held are
// before Ready reads them: its requests read them at loadEvery.
const readyLoadAfter = 2 * loadEvery

// loadedBefore reports whether the shared facts were never read, or last
// read age or more ago (on loadShared's clock).
func (d *Deliverer) loadedBefore(age time.Duration) bool {
	at := d.loadedAt.Load()
	return at == 0 || d.now().UnixNano()-at >= int64(age)
}
