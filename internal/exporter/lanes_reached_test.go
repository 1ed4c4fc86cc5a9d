package exporter

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
)

// A lane's batch leaves its record only when its tenant's account cannot
// have taken it: a wait that sent nothing, or requests all answered 4xx.
// Otherwise its push's error keeps it recorded, to go again under its key
// (the soak's "pairs accepted under two idempotency keys" at a tenant).
func TestLaneBatchMayHaveReached(t *testing.T) {
	t.Parallel()
	wait := func(statuses ...int) error {
		we := &delivery.WaitError{Err: delivery.ErrGaveUp}
		for _, s := range statuses {
			we.Attempts = append(we.Attempts, delivery.Attempt{Status: s})
		}
		return we
	}
	require.False(t, mayHaveReached(delivery.Batch{}, wait()), "held: nothing sent")
	require.False(t, mayHaveReached(delivery.Batch{}, wait(429, 429)), "429s: nothing taken")
	require.True(t, mayHaveReached(delivery.Batch{}, wait(429, 0)), "a request without an answer")
	require.True(t, mayHaveReached(delivery.Batch{}, wait(503)), "a 5xx")
	require.True(t, mayHaveReached(delivery.Batch{}, context.DeadlineExceeded), "cut short")
	require.True(t, mayHaveReached(delivery.Batch{Resent: true}, wait()), "recorded by an earlier holder")

	// The router: an unconnected tenant's batch, never sent, is answered
	// empty (its rows wait); so is a new batch of a held tenant. A
	// recorded batch of a held tenant, or one that may have reached, ends
	// the pass with a wait, so the lane's job snoozes and resends it.
	r := &tenantRouter{tenants: stubTenants{err: errors.New("unconnected")}, logger: slog.New(slog.DiscardHandler), source: "s"}
	b := delivery.Batch{Salt: tenantSalt("source:s@0", "acme")}
	out, err := r.Deliver(t.Context(), b)
	require.NoError(t, err)
	require.Empty(t, out.Accepted)
	r.tenants = stubTenants{dest: stubDest{err: wait()}}
	out, err = r.Deliver(t.Context(), b)
	require.NoError(t, err)
	require.Empty(t, out.Accepted)
	b.Resent = true
	_, err = r.Deliver(t.Context(), b)
	require.True(t, errors.As(err, new(*delivery.WaitError)), "a recorded batch stays recorded")
	r.tenants = stubTenants{dest: stubDest{err: context.DeadlineExceeded}}
	_, err = r.Deliver(t.Context(), delivery.Batch{Salt: tenantSalt("source:s@0", "acme")})
	var we *delivery.WaitError
	require.True(t, errors.As(err, &we), "cut short: a wait")
	require.Equal(t, TenantRetryDefault, we.Wait)
}

type stubTenants struct {
	dest Destination
	err  error
}

func (s stubTenants) For(context.Context, string) (Destination, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.dest, nil
}

type stubDest struct{ err error }

func (d stubDest) Deliver(context.Context, delivery.Batch) (*delivery.Outcome, error) {
	return nil, d.err
}
func (d stubDest) MaxInFlight() int { return 1 }
