package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The console's trusted proxies are addresses or CIDR prefixes; anything
// else exits 2 naming the setting and the value.
func TestConsoleTrustedProxiesSetting(t *testing.T) {
	t.Parallel()
	db := []string{"run", "--database-url", "postgres://127.0.0.1:5432/test", "--thirdparty-url", "http://127.0.0.1:9"}
	for _, tt := range []struct {
		name, proxies, want string
	}{
		{"not an address", "10.0.0.0/8,proxy.internal", `--console-trusted-proxies (SYNCER_CONSOLE_TRUSTED_PROXIES): "proxy.internal" is no address or CIDR prefix`},
		{"bad prefix", "10.0.0.0/33", `--console-trusted-proxies (SYNCER_CONSOLE_TRUSTED_PROXIES): "10.0.0.0/33" is no address or CIDR prefix`},
		// Read fine: the next setting checked is the one that fails.
		{"addresses and prefixes", "10.0.0.0/8, 192.0.2.7,fd00::/8,::1", "--workers (SYNCER_WORKERS) must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t.Context(), append(db, "--console-trusted-proxies", tt.proxies, "--workers", "0")...)
			require.Equal(t, 2, r.code, r.stderr)
			oneLine(t, r, tt.want)
		})
	}
}
