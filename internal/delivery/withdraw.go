package delivery

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// ErrWithdrawn is Deliver's error for a batch withdrawn while it waited
// for its token (WithWithdraw): none of its requests was sent, so nothing
// of it reached the third party, and the token it was given is given
// back.
var ErrWithdrawn = errors.New("delivery: withdrawn before any request was sent")

// withdrawal is one Deliver's withdrawal: the signal, and whether it has
// begun sending (then it is never withdrawn) or was withdrawn (then it
// sends nothing more). Its requests share it, so a batch split over
// several requests is withdrawn whole or not at all.
type withdrawal struct {
	ch    <-chan struct{}
	state atomic.Int32 // withdrawOpen, withdrawSending or withdrawDone
}

const (
	withdrawOpen int32 = iota
	withdrawSending
	withdrawDone
)

type withdrawKey struct{}

// WithWithdraw returns a context for one Deliver call whose batch is
// withdrawn when ch closes, if none of its requests was sent by then:
// Deliver then returns ErrWithdrawn at once rather than wait for its
// token. A request already on its way is never withdrawn, nor is a
// request of a batch one of whose requests was sent. Its caller must
// treat the batch as never sent (its rows read again, never its key
// sent with another body).
func WithWithdraw(ctx context.Context, ch <-chan struct{}) context.Context {
	return context.WithValue(ctx, withdrawKey{}, &withdrawal{ch: ch})
}

// withdrawalOf is ctx's withdrawal, nil when it has none.
func withdrawalOf(ctx context.Context) *withdrawal {
	w, _ := ctx.Value(withdrawKey{}).(*withdrawal)
	return w
}

// signal is the channel a wait for a token selects on to be withdrawn:
// nil (never) once a request of the batch is being sent.
func (w *withdrawal) signal() <-chan struct{} {
	if w == nil || w.state.Load() == withdrawSending {
		return nil
	}
	return w.ch
}

// withdraw reports whether the batch is withdrawn now, making it so when
// nothing of it was sent yet.
func (w *withdrawal) withdraw() bool {
	return w.state.CompareAndSwap(withdrawOpen, withdrawDone) || w.state.Load() == withdrawDone
}

// sending reports whether a request may go: false once the batch was
// withdrawn. After true, the batch is never withdrawn.
func (w *withdrawal) sending() bool {
	if w == nil {
		return true
	}
	return w.state.CompareAndSwap(withdrawOpen, withdrawSending) || w.state.Load() == withdrawSending
}

// waiter is a request waiting for its token that may be withdrawn: its
// reservation, its batch's withdrawal, and when its token is due.
type waiter struct {
	res       *rate.Reservation
	w         *withdrawal
	at        time.Time
	withdrawn bool // its reservation was given back (under the pacer's mu)
}

func (p *pacer) addWaiter(res *rate.Reservation, w *withdrawal, at time.Time) *waiter {
	wt := &waiter{res: res, w: w, at: at}
	p.mu.Lock()
	p.waiters = append(p.waiters, wt)
	p.mu.Unlock()
	return wt
}

// dropWaiter forgets wt (nil: none) and reports whether it may go on:
// false when it was withdrawn, its reservation given back.
func (p *pacer) dropWaiter(wt *waiter) bool {
	if wt == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if wt.withdrawn {
		return false
	}
	p.waiters = slices.DeleteFunc(p.waiters, func(o *waiter) bool { return o == wt })
	return true
}

// withdrawWaiters withdraws every request waiting for its token under
// signal sig whose batch sent nothing yet, and gives their tokens back,
// the latest first: x/time/rate gives a cancelled reservation's token back
// only when no later one is outstanding, so the requests of a tenant
// withdrawn at once, each on its own, gave back only the last (a 10/s
// tenant withdrawn 4 requests ahead lost 300 ms of its tokens when the
// earliest went first).
func (p *pacer) withdrawWaiters(sig <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var mine []*waiter
	for _, wt := range p.waiters {
		if wt.w.ch == sig {
			mine = append(mine, wt)
		}
	}
	if len(mine) == 0 {
		return
	}
	slices.SortFunc(mine, func(a, b *waiter) int { return b.at.Compare(a.at) })
	now := p.advanceLocked(p.now())
	for _, wt := range mine {
		if wt.w.withdraw() {
			wt.res.CancelAt(now)
			wt.withdrawn = true
		}
	}
	p.waiters = slices.DeleteFunc(p.waiters, func(o *waiter) bool { return o.withdrawn })
}
