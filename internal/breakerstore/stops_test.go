package breakerstore_test

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// TestStateStops covers every fact that stops a destination, and the ones
// that have ended: syncer_source_stopped reads it, and status says the
// same facts in words.
func TestStateStops(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		state breakerstore.State
		want  bool
	}{
		{"nothing recorded", breakerstore.State{}, false},
		{"paused by a person", breakerstore.State{Hold: breakerstore.Hold{Paused: true}}, true},
		{"credentials refused", breakerstore.State{Credentials: breakerstore.Refusal{Refused: true}}, true},
		{"configuration refused", breakerstore.State{Configuration: breakerstore.Refusal{Refused: true}}, true},
		{"breaker open", breakerstore.State{Breaker: breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: now.Add(time.Minute)}}, true},
		{"breaker open past its expiry", breakerstore.State{Breaker: breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: now.Add(-time.Second)}}, false},
		{"third party's pause", breakerstore.State{Pause: breakerstore.Pause{Until: now.Add(time.Second)}}, true},
		{"third party's pause over", breakerstore.State{Pause: breakerstore.Pause{Until: now}}, false},
		{"a last error alone", breakerstore.State{LastError: breakerstore.LastError{Text: "503"}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.state.Stops(now))
		})
	}
}
