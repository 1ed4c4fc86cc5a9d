package status

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// ReadDestination reads a configured destination's shared facts, as the
// report shows them; its sources and requests in flight are left empty.
func ReadDestination(ctx context.Context, pool *pgxpool.Pool, name string) (Destination, error) {
	return readDestination(ctx, pool, name)
}

// readDestination reads a configured destination's shared facts.
func readDestination(ctx context.Context, pool *pgxpool.Pool, name string) (Destination, error) {
	d := Destination{Name: name}
	st, err := breakerstore.ReadStateOf(ctx, pool, breakerstore.DestinationNamespace(name))
	if err != nil {
		return d, fmt.Errorf("status: destination %s: %w", name, err)
	}
	now := time.Now()
	d.Breaker = Breaker{State: BreakerStateName(int(st.Breaker.Current(now))), Until: st.Breaker.OpenUntil(now)}
	d.Credentials, d.Configuration = st.Credentials, st.Configuration
	if st.Pause.Active(now) {
		d.Pause = &st.Pause
	}
	if st.Rate.Limit > 0 {
		d.Rate = &st.Rate
	}
	if st.LastError.Text != "" {
		d.LastError = &st.LastError
	}
	if st.Hold.Paused {
		d.Paused = &st.Hold
		d.InFlightNote = PausedInFlight
	}
	if !st.Certificates.NotAfter.IsZero() {
		d.Certificate = &st.Certificates
	}
	return d, nil
}

func readState(ctx context.Context, pool *pgxpool.Pool, r *Report) error {
	st, err := breakerstore.ReadState(ctx, pool)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	now := time.Now()
	r.Breaker.State = BreakerStateName(int(st.Breaker.Current(now)))
	r.Breaker.Until = st.Breaker.OpenUntil(now)
	r.Credentials, r.Configuration = st.Credentials, st.Configuration
	if st.Pause.Active(now) {
		r.Pause = &st.Pause
	}
	if st.Rate.Limit > 0 {
		r.Rate = &st.Rate
	}
	if st.LastError.Text != "" {
		r.LastError = &st.LastError
	}
	return nil
}

// BreakerStateName names gobreaker's states.
func BreakerStateName(s int) string {
	switch s {
	case 1:
		return "half-open"
	case 2:
		return "open"
	default:
		return "closed"
	}
}
