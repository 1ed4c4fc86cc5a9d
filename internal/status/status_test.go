package status_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/status"
)

func TestBreakerState(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		raw   string
		state int
		until time.Time
	}{
		{"closed", `{"state":0}`, 0, time.Time{}},
		{"open", `{"state":2,"expiry":"2026-11-22T01:00:05Z"}`, 2, now.Add(5 * time.Second)},
		{"open, timeout passed", `{"state":2,"expiry":"2026-11-22T00:59:55Z"}`, 1, time.Time{}},
		{"half-open", `{"state":1}`, 1, time.Time{}},
		{"garbage", `not json`, 0, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			state, until := status.BreakerState([]byte(tt.raw), now)
			require.Equal(t, tt.state, state)
			require.True(t, tt.until.Equal(until), "until %s", until)
			require.NotEmpty(t, status.BreakerStateName(state))
		})
	}
}
