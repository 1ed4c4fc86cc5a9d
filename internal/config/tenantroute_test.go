package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
)

// Issue 43: a source without a tenant column may not send to a
// destination that sends each tenant to its own URL (no url, or {tenant}
// in it), and a source with one may not send to the default destination
// (SYNCER_THIRDPARTY_*), which has no tenants; each refusal names the
// source and its field.
func TestTenantRouteRefused(t *testing.T) {
	t.Parallel()
	const dests = "destinations:\n" +
		"  plain:\n    url: https://crm.example.com\n" +
		"  bytenant:\n    url: https://crm.example.com/t/{tenant}\n" +
		"  byrow:\n    tenants:\n      query: SELECT url, token FROM connections WHERE account = $1\n"
	file := func(dest, extra string) []byte {
		return []byte(dests + "sources:\n  - table: contacts\n    key: id\n    destination: " + dest + "\n" + extra)
	}
	for _, tt := range []struct{ dest, extra, want string }{
		{"bytenant", "", `sources[0] (contacts): destination: destination "bytenant" has {tenant} in its url: only a source with a tenant column (tenant: <column>) may send to it (line 12)`},
		{"byrow", "", `sources[0] (contacts): destination: destination "byrow" has no url`},
		{"default", "    tenant: account\n", `sources[0] (contacts): tenant: a source with a tenant column must send to a configured destination: destination "default" (SYNCER_THIRDPARTY_*) has no tenants`},
	} {
		_, err := config.Parse(file(tt.dest, tt.extra), nil)
		require.Error(t, err, tt.dest)
		require.Contains(t, err.Error(), tt.want)
	}
	for _, tt := range []struct{ dest, extra string }{
		{"plain", ""},
		{"plain", "    tenant: account\n"},
		{"bytenant", "    tenant: account\n"},
		{"byrow", "    tenant: account\n"},
		{"default", ""},
	} {
		_, err := config.Parse(file(tt.dest, tt.extra), nil)
		require.NoError(t, err, tt)
	}
}
