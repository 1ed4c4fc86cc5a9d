package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// A run from the command line is a process of its own, not the daemon
// whose deliverer keeps the destination's rate limit (the daemons keep it
// cluster-wide by pushing to a destination from one process at a time,
// under its lock, and share what they learn through the destination's
// facts). So the run says, in those facts, what share of the rate it
// takes (breakerstore.VerifyShare), and every deliverer of the
// destination sends at the rest: the export and the verify together stay
// within rate_limit, and the verify within PendingShare of it while rows
// are pending.
//
// The deliverers read the facts at least every second, through a cache of
// a second (ShareLag): a share the run raises is taken only once they have
// seen it, and a share it lowers at once. The share is a lease (ShareLease)
// renewed while the run goes on, so a run killed stops counting soon.

const (
	// IdleShare is the share a run takes while nothing is pending: the
	// export keeps the rest, so that a row written meanwhile goes out at
	// once, before the run sees it pending and steps down to PendingShare.
	IdleShare = 0.75
	// ShareLag is how long a raised share waits before it is used.
	ShareLag = 2500 * time.Millisecond
	// ShareLease is how long a share holds unless renewed.
	ShareLease = 10 * time.Second
	// shareRenew is how often the lease is renewed.
	shareRenew = 2 * time.Second
)

// Sharer records a run's share of the destination's rate: a
// *breakerstore.Store of the destination's (or the tenant's) namespace.
type Sharer interface {
	SetVerifyShare(ctx context.Context, v breakerstore.VerifyShare) error
}

var _ Sharer = (*breakerstore.Store)(nil)

// share is the lease of a run's share.
type share struct {
	store Sharer
	// granted is the share in force (the deliverers have seen it);
	// asked, written at askedAt, is the one wanted.
	granted, asked float64
	askedAt        time.Time
	renewedAt      time.Time
}

// Yield makes the run take its rate as a share of the destination's,
// recorded through store so that the daemons' deliverers send at the rest
// (see above). Release ends it.
func (p *Pace) Yield(store Sharer) *Pace {
	p.share = &share{store: store}
	return p
}

// shareOf returns the share of the rate the run may use now, wanting want:
// it records want, uses a raised share ShareLag after recording it (the
// first one at once when nothing is pending, else it waits), and renews
// the lease.
func (p *Pace) shareOf(ctx context.Context, want float64, pending bool) (float64, error) {
	s := p.share
	now := p.now()
	switch {
	case want < s.asked || (want > s.asked && s.granted == s.asked):
		// Lowered: at once. Raised: from ShareLag on; the first share at
		// once when nothing is pending (the export has nothing to send
		// that could overlap).
		first := s.granted == 0
		if err := p.writeShare(ctx, want, now); err != nil {
			return 0, err
		}
		if want < s.granted || (first && !pending) {
			s.granted = want
		}
	case now.Sub(s.renewedAt) >= shareRenew:
		if err := p.writeShare(ctx, s.asked, now); err != nil {
			return 0, err
		}
	}
	if s.asked > s.granted && p.now().Sub(s.askedAt) >= ShareLag {
		s.granted = s.asked
	}
	if s.granted == 0 {
		// The first share, while the export sends: wait until the
		// deliverers have seen it.
		if err := p.sleep(ctx, s.askedAt.Add(ShareLag).Sub(p.now())); err != nil {
			return 0, err
		}
		s.granted = s.asked
	}
	return s.granted, nil
}

func (p *Pace) writeShare(ctx context.Context, v float64, now time.Time) error {
	s := p.share
	if err := s.store.SetVerifyShare(ctx, breakerstore.VerifyShare{Share: v, Until: now.Add(ShareLease)}); err != nil {
		return fmt.Errorf("verify: pace: record the share of the rate: %w", err)
	}
	if v != s.asked {
		s.askedAt = now
	}
	s.asked, s.renewedAt = v, now
	return nil
}

// Release gives the run's share of the rate back to the export; a run's
// end calls it (even after ctx ended).
func (p *Pace) Release(ctx context.Context) error {
	if p == nil || p.share == nil || p.share.renewedAt.IsZero() {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := p.share.store.SetVerifyShare(wctx, breakerstore.VerifyShare{})
	p.share.granted, p.share.asked, p.share.renewedAt = 0, 0, time.Time{}
	return err
}
