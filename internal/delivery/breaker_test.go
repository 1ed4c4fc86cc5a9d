package delivery

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var errDown = errors.New("503")

// A successor inherits its predecessor's breaker as it stands: open while
// the open period lasts, then half-open with exactly one probe, never
// closed because the period ran out.
func TestBreakerInherited(t *testing.T) {
	t.Parallel()
	const timeout = 10 * time.Second
	tests := []struct {
		name   string
		stored func(now time.Time) breakerstore.Breaker
		fenced time.Duration // how long nothing goes
	}{
		{"open, 5 s of its period left", func(now time.Time) breakerstore.Breaker {
			return breakerstore.Breaker{State: gobreaker.StateOpen, Generation: 3, Expiry: now.Add(5 * time.Second)}
		}, 5 * time.Second},
		{"open, its period over", func(now time.Time) breakerstore.Breaker {
			return breakerstore.Breaker{State: gobreaker.StateOpen, Generation: 3, Expiry: now.Add(-time.Second)}
		}, 0},
		{"half-open", func(time.Time) breakerstore.Breaker {
			return breakerstore.Breaker{State: gobreaker.StateHalfOpen, Generation: 4}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			b := newBreaker(5, timeout, clock.now)
			require.True(t, b.adopt(tt.stored(clock.now())))
			require.False(t, b.adopt(tt.stored(clock.now())), "taken once")

			if tt.fenced > 0 {
				st, until := b.state()
				require.Equal(t, gobreaker.StateOpen, st)
				require.Equal(t, clock.now().Add(tt.fenced), until)
				_, err := b.allow()
				var we *WaitError
				require.ErrorAs(t, err, &we)
				require.ErrorIs(t, err, ErrBreakerOpen)
				require.Equal(t, tt.fenced, we.Wait)
				clock.advance(tt.fenced)
			}
			st, _ := b.state()
			require.Equal(t, gobreaker.StateHalfOpen, st, "past the period: half-open, not closed")

			// Exactly one probe; the others wait for its answer.
			probe, err := b.allow()
			require.NoError(t, err)
			for range 3 {
				_, err = b.allow()
				require.ErrorIs(t, err, errProbing)
			}
			// A 429 says nothing of health: still half-open.
			probe(errNotCounted)
			probe, err = b.allow()
			require.NoError(t, err)
			_, err = b.allow()
			require.ErrorIs(t, err, errProbing)

			// A failed probe opens it for the whole period.
			probe(errDown)
			_, err = b.allow()
			var we *WaitError
			require.ErrorAs(t, err, &we)
			require.Equal(t, timeout, we.Wait)
			clock.advance(timeout)

			// Then one probe again; its success closes the breaker.
			probe, err = b.allow()
			require.NoError(t, err)
			_, err = b.allow()
			require.ErrorIs(t, err, errProbing)
			probe(nil)
			st, _ = b.state()
			require.Equal(t, gobreaker.StateClosed, st)
			for range 3 {
				done, err := b.allow()
				require.NoError(t, err, "closed: requests go side by side")
				defer done(nil)
			}

			// What was logged and stored: each change once, in order.
			var got []string
			for _, tr := range b.transitions() {
				got = append(got, tr.from.String()+">"+tr.to.String())
			}
			want := []string{"half-open>open", "open>half-open", "half-open>closed"}
			if tt.fenced > 0 {
				want = append([]string{"open>half-open"}, want...)
			}
			require.Equal(t, want, got)
		})
	}
}

// What this process stored is not taken back as another daemon's, and a
// closed breaker in the store is nothing to inherit.
func TestBreakerNotInherited(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := newBreaker(5, 10*time.Second, clock.now)
	own := breakerstore.Breaker{State: gobreaker.StateOpen, Generation: 1, Expiry: clock.now().Add(-time.Second)}
	b.wrote(own)
	require.False(t, b.adopt(own))
	require.False(t, b.adopt(breakerstore.Breaker{State: gobreaker.StateClosed, Generation: 7}))
	for range 3 {
		done, err := b.allow()
		require.NoError(t, err)
		defer done(nil)
	}
}
