package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/formats/readback"
)

// PendingShare is the share of the destination's requests a run may take
// while the source has rows pending: the export catching up keeps the rest.
const PendingShare = 0.25

// Pace paces a run's lookups at a destination's rate limit. A run from the
// command line is a process of its own, not a daemon, so it cannot share
// the daemon's limiter: it gets its own, at a share of the destination's
// rate that it tells the daemons (Yield, share.go), which send at the rest
// (PendingShare while rows are pending, IdleShare otherwise). Without
// Yield it takes PendingShare of the rate while rows are pending and the
// whole rate otherwise. Without a rate limit, the run holds one request at
// a time, a quarter of the default max_in_flight of 4.
//
// The daemons' shared facts of the destination (breakerstore) stop it as
// they stop the export: while the breaker is open or the third party asked
// for a pause, a lookup waits; a person's pause or refused credentials or
// configuration end the run (exit 1, resumable). A rate the daemons learnt
// below the configured one is used instead.
type Pace struct {
	limit     float64
	burst     int
	limiter   *rate.Limiter
	namespace *string
	now       func() time.Time
	sleep     func(context.Context, time.Duration) error
	// spread, when set, spreads a background run's lookups over its
	// period; last is when the last lookup went.
	spread *spread
	last   time.Time
	// hurry, once done, ends the spread: someone asked for a run while
	// this one was spread over its period (Hurry).
	hurry context.Context
	// turn, when set, takes a request of the daemon's deliverer of the
	// destination, so that verify and export share its rate limit.
	turn func(context.Context) error
	// share, when set, is the run's share of the destination's rate,
	// told to the daemons (share.go, Yield).
	share *share
}

// NewPace returns a Pace at limit requests a second with burst; limit 0
// means no limit.
func NewPace(limit float64, burst int) *Pace {
	p := &Pace{limit: limit, burst: max(burst, 1), now: time.Now, sleep: readback.Sleep}
	if limit > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(limit), p.burst)
	}
	return p
}

// Shared makes the pace obey the daemons' facts of the destination whose
// breakerstore namespace is ns (breakerstore.DestinationNamespace).
func (p *Pace) Shared(ns string) *Pace {
	p.namespace = &ns
	return p
}

// Spread spreads a background run's lookups, about lookups of them, over
// aim from now rather than bursting them: each waits the time left over
// the lookups left. A run that makes more than lookups quickens so as to
// end within bound all the same (spread.go). The lookups still wait for
// the destination's pace: a spread only ever slows them.
func (p *Pace) Spread(lookups int64, aim, bound time.Duration) *Pace {
	p.spread = newSpread(p.now(), lookups, aim, bound)
	return p
}

// Hurry makes the spread end once hurry is done: the run's remaining
// lookups, and one waiting for the spread, then go at the destination's
// pace. A daemon hurries its periodic run when someone asks for a run of
// the source ("Verify now"), which would otherwise wait for the spread
// run to end, up to half a period later.
func (p *Pace) Hurry(hurry context.Context) *Pace {
	p.hurry = hurry
	return p
}

// Turn makes every lookup also wait for, and take, a request of the
// destination's shared limiter (a daemon's delivery.Deliverer.Turn): the
// lookups and the export then stay within the destination's rate limit
// together, and the lookups within PendingShare of it while rows are
// pending.
func (p *Pace) Turn(turn func(context.Context) error) *Pace {
	p.turn = turn
	return p
}

// ErrDestinationStopped is returned, wrapped, when a person or a refusal
// stopped the destination: verify does not read where the export may not
// send.
var ErrDestinationStopped = errors.New("destination stopped")

// obey waits while the daemons' shared facts stop the destination for a
// while, and returns the rate they learnt (0: none).
func (p *Pace) obey(ctx context.Context, q database.Querier) (float64, error) {
	if p.namespace == nil {
		return 0, nil
	}
	for {
		st, err := breakerstore.ReadStateOf(ctx, q, *p.namespace)
		if err != nil {
			return 0, err
		}
		now := p.now()
		switch {
		case st.Hold.Paused:
			return 0, fmt.Errorf("%w: paused by %s (syncer resume)", ErrDestinationStopped, st.Hold.By)
		case st.Credentials.Refused:
			return 0, fmt.Errorf("%w: its credentials are refused", ErrDestinationStopped)
		case st.Configuration.Refused:
			return 0, fmt.Errorf("%w: its URL or configuration is refused", ErrDestinationStopped)
		case st.Breaker.Current(now) == gobreaker.StateOpen || st.Pause.Active(now):
			wait := time.Second
			if until := st.Breaker.OpenUntil(now); until.After(now) {
				wait = min(until.Sub(now), 10*time.Second)
			}
			if err := p.sleep(ctx, wait); err != nil {
				return 0, err
			}
			continue
		}
		return st.Rate.Limit, nil
	}
}

// Wait blocks until a lookup may go: at the full rate while src has
// nothing pending, at PendingShare of it otherwise.
func (p *Pace) Wait(ctx context.Context, q database.Querier, src Source) error {
	if p.spread != nil && !p.hurried() {
		if wait := p.spread.next(p.last).Sub(p.now()); wait > 0 {
			if err := p.sleepSpread(ctx, wait); err != nil {
				return err
			}
		}
	}
	learnt, err := p.obey(ctx, q)
	if err != nil {
		return fmt.Errorf("verify: pace: %w", err)
	}
	if err := p.waitOwn(ctx, q, src, learnt); err != nil {
		return err
	}
	if p.turn != nil {
		if err := p.turn(ctx); err != nil {
			return fmt.Errorf("verify: pace: %w", err)
		}
	}
	p.last = p.now()
	if p.spread != nil {
		p.spread.done++
	}
	return nil
}

func (p *Pace) hurried() bool { return p.hurry != nil && p.hurry.Err() != nil }

// sleepSpread sleeps d, or until the run is hurried.
func (p *Pace) sleepSpread(ctx context.Context, d time.Duration) error {
	if p.hurry == nil {
		return p.sleep(ctx, d)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.hurry, cancel)()
	err := p.sleep(sctx, d)
	if err != nil && ctx.Err() == nil && p.hurried() {
		return nil
	}
	return err
}

// waitOwn waits for the run's own limiter: the destination's rate, or
// PendingShare of it while src has rows pending.
func (p *Pace) waitOwn(ctx context.Context, q database.Querier, src Source, learnt float64) error {
	if p.limiter == nil {
		return nil
	}
	pending, err := src.AnyPending(ctx, q)
	if err != nil {
		return fmt.Errorf("verify: pace: %w", err)
	}
	limit, burst := p.limit, p.burst
	if learnt > 0 && learnt < limit {
		limit = learnt
	}
	switch {
	case p.share != nil:
		want := IdleShare
		if pending {
			want = PendingShare
		}
		got, err := p.shareOf(ctx, want, pending)
		if err != nil {
			return err
		}
		// One request at a time: the export keeps the burst.
		limit, burst = limit*got, 1
	case pending:
		limit, burst = limit*PendingShare, max(1, int(math.Floor(float64(p.burst)*PendingShare)))
	}
	if p.limiter.Limit() != rate.Limit(limit) {
		p.limiter.SetLimit(rate.Limit(limit))
	}
	if p.limiter.Burst() != burst {
		p.limiter.SetBurst(burst)
	}
	return p.limiter.Wait(ctx)
}

// Limit returns the rate a lookup goes at now (for tests and logs).
func (p *Pace) Limit() float64 {
	if p.limiter == nil {
		return 0
	}
	return float64(p.limiter.Limit())
}
