package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
)

func TestParseVerifyEvery(t *testing.T) {
	t.Parallel()
	file := strings.Replace(valid, "    max_in_flight: 2\n", "    max_in_flight: 2\n    verify_every: 24h\n    verify_heal: true\n", 1)
	cfg, err := config.Parse([]byte(file), nil)
	require.NoError(t, err)
	crm := cfg.Destination("crm")
	require.Equal(t, 24*time.Hour, crm.VerifyEvery)
	require.True(t, crm.VerifyHeal)
	wh := cfg.Destination("warehouse")
	require.Zero(t, wh.VerifyEvery)
	require.False(t, wh.VerifyHeal)

	for _, tt := range []struct{ fields, want string }{
		{"    verify_every: 10s\n", "destinations.crm.verify_every: must be a duration of at least 1m"},
		{"    verify_every: daily\n", "destinations.crm.verify_every: must be a duration"},
		{"    verify_every: 24\n", "destinations.crm.verify_every: must be a duration"},
		{"    verify_heal: true\n", "destinations.crm.verify_heal: needs verify_every"},
		{"    verify_every: 1h\n    verify_heal: yes please\n", "destinations.crm.verify_heal: must be true or false"},
	} {
		_, err := config.Parse([]byte(strings.Replace(valid, "    max_in_flight: 2\n", "    max_in_flight: 2\n"+tt.fields, 1)), nil)
		require.ErrorContains(t, err, tt.want, tt.fields)
	}
}
