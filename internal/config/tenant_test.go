package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Issue 43: a source's tenant column and its lanes.
func TestSourceTenantAndLanes(t *testing.T) {
	t.Parallel()
	file := func(extra string) []byte {
		return []byte("destinations:\n  crm:\n    url: https://crm.example.com\nsources:\n  - table: contacts\n    key: id\n    destination: crm\n" + extra)
	}
	cfg, err := config.Parse(file("    tenant: account_id\n"), nil)
	require.NoError(t, err)
	s := cfg.Source("contacts")
	require.Equal(t, "account_id", s.Tenant)
	require.Equal(t, sources.LanesDefault, s.Lanes, "lanes default to 16 with a tenant")

	cfg, err = config.Parse(file("    tenant: account_id\n    lanes: 4\n"), nil)
	require.NoError(t, err)
	require.Equal(t, 4, cfg.SourceSpecs()[0].Lanes)

	cfg, err = config.Parse(file(""), nil)
	require.NoError(t, err)
	require.Zero(t, cfg.Source("contacts").Lanes, "no lanes without a tenant")

	for _, tt := range []struct{ extra, want string }{
		{"    lanes: 4\n", "sources[0] (contacts): lanes: needs tenant"},
		{"    tenant: a\n    lanes: 0\n", "lanes: must be a whole number, 1 or more"},
		{"    tenant: a\n    lanes: 1000\n", "lanes: must be at most 256"},
		{"    tenant: \"\"\n", "tenant:"},
	} {
		_, err := config.Parse(file(tt.extra), nil)
		require.Error(t, err, tt.extra)
		require.Contains(t, err.Error(), tt.want)
	}
}
