package verify

import (
	"context"
	"fmt"
	"math"

	"golang.org/x/time/rate"

	"github.com/syncer-dev/syncer/internal/database"
)

// PendingShare is the share of the destination's requests a run may take
// while the source has rows pending: the export catching up keeps the rest.
const PendingShare = 0.25

// Pace paces a run's lookups at a destination's rate limit. A run from the
// command line is a process of its own, not a daemon, so it cannot share
// the daemon's limiter: it gets its own at the destination's configured
// rate, and while rows are pending it takes PendingShare of it, so that
// verify and export together stay within the limit plus a quarter at most
// (docs/operations.md says to keep --rate-limit at the third party's limit
// less a quarter where that matters). Without a rate limit, the run holds
// one request at a time, a quarter of the default max_in_flight of 4.
type Pace struct {
	limit   float64
	burst   int
	limiter *rate.Limiter
}

// NewPace returns a Pace at limit requests a second with burst; limit 0
// means no limit.
func NewPace(limit float64, burst int) *Pace {
	p := &Pace{limit: limit, burst: max(burst, 1)}
	if limit > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(limit), p.burst)
	}
	return p
}

// Wait blocks until a lookup may go: at the full rate while src has
// nothing pending, at PendingShare of it otherwise.
func (p *Pace) Wait(ctx context.Context, q database.Querier, src Source) error {
	if p.limiter == nil {
		return nil
	}
	pending, err := src.AnyPending(ctx, q)
	if err != nil {
		return fmt.Errorf("verify: pace: %w", err)
	}
	limit, burst := p.limit, p.burst
	if pending {
		limit, burst = p.limit*PendingShare, max(1, int(math.Floor(float64(p.burst)*PendingShare)))
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
