package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func thirdpartyURL(u string) thirdparty.Config { return thirdparty.Config{URL: u} }

func TestBreakerState(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		raw   string
		state int
	}{
		{"closed", `{"state":0}`, 0},
		{"open", `{"state":2,"expiry":"2026-11-22T01:00:05Z"}`, 2},
		{"open, timeout passed", `{"state":2,"expiry":"2026-11-22T00:59:55Z"}`, 1},
		{"half-open", `{"state":1}`, 1},
		{"garbage", `not json`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.state, daemon.BreakerState([]byte(tt.raw), now))
		})
	}
}
