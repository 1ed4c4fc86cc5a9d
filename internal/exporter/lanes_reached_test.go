package exporter

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/sources"
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

// In a lane, a batch that may have reached its tenant's account is left
// recorded and its tenant set aside: later batches of the tenant are
// answered without a request (a resent one left recorded, one never sent
// answered empty) until its recorded batch is let through again.
func TestLaneRouterSetsTenantAside(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	f := &laneFeed{name: "syncer_source:s$lane0", src: &sources.Source{Name: "s"}, now: func() time.Time { return now },
		logger: slog.New(slog.DiscardHandler)}
	dest := &countDest{err: &delivery.WaitError{Err: delivery.ErrGaveUp, Attempts: []delivery.Attempt{{Status: 503}}}}
	f.tenants = stubTenants{dest: dest}
	r := &tenantRouter{tenants: f.tenants, logger: f.logger, source: "s", feeds: map[string]*laneFeed{f.name: f}}
	b := delivery.Batch{Key: "k1", Salt: tenantSalt(f.name, "acme")}
	_, err := r.Deliver(t.Context(), b)
	var lr *leftRecorded
	require.True(t, errors.As(err, &lr), "a 5xx: left recorded")
	require.True(t, f.isAside("acme"))
	require.Equal(t, 1, dest.n)

	out, err := r.Deliver(t.Context(), delivery.Batch{Key: "k2", Salt: b.Salt})
	require.NoError(t, err, "a batch never sent: answered empty")
	require.Empty(t, out.Accepted)
	_, err = r.Deliver(t.Context(), delivery.Batch{Key: "k0", Salt: b.Salt, Resent: true})
	require.True(t, errors.As(err, &lr), "an earlier holder's batch: left recorded")
	require.Equal(t, 1, dest.n, "no request while aside")
	ok, _ := f.ready(t.Context(), "acme")
	require.False(t, ok, "not read while aside")
	require.Empty(t, f.due(now), "waits asideRetry")
	require.Equal(t, []string{"acme"}, f.due(now.Add(asideRetry)))

	// Its batch sent again (resends) goes through, once.
	f.mu.Lock()
	f.aside["acme"].resending = "k1"
	f.mu.Unlock()
	dest.err = nil
	b.Resent = true
	_, err = r.Deliver(t.Context(), b)
	require.NoError(t, err)
	require.Equal(t, 2, dest.n)
	_, err = r.Deliver(t.Context(), b)
	require.True(t, errors.As(err, &lr), "let through once")

	// A recorded batch of a tenant unconnected since is left recorded
	// too: it may have reached the account it had.
	f.aside = nil
	r.tenants = stubTenants{err: errors.New("unconnected")}
	_, err = r.Deliver(t.Context(), b)
	require.True(t, errors.As(err, &lr))
	require.True(t, f.isAside("acme"))
}

type countDest struct {
	n   int
	err error
}

func (d *countDest) Deliver(context.Context, delivery.Batch) (*delivery.Outcome, error) {
	d.n++
	if d.err != nil {
		return nil, d.err
	}
	return &delivery.Outcome{}, nil
}
func (d *countDest) MaxInFlight() int { return 1 }
