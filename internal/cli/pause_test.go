package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/status"
)

// Issue 45: while a person paused a destination, status (text and --json)
// says what its requests in flight are; resumed, it says the plain count
// again. With no daemon running, pause and resume return at once.
func TestStatusSaysWhatInFlightMeansWhilePaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupConfigured(t, ordersDDL, ordersToCRM)

	r := run(ctx, "pause", "--destination", "crm", "--within", "1s", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "every running daemon holds the pause")

	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "PAUSED by command line since")
	require.Contains(t, r.stdout, "0 requests in flight ("+status.PausedInFlight+")")

	r = run(ctx, "status", "--database-url", b.dsn, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st struct {
		Destinations []struct {
			InFlightNote string `json:"in_flight_note"`
		} `json:"destinations"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Destinations, 1)
	require.Equal(t, status.PausedInFlight, st.Destinations[0].InFlightNote)

	r = run(ctx, "resume", "--destination", "crm", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, "PAUSED")
	require.True(t, strings.Contains(r.stdout, "0 requests in flight\n") || strings.HasSuffix(strings.TrimSpace(r.stdout), "0 requests in flight"), r.stdout)

	r = run(ctx, "pause", "--destination", "crm", "--within", "0s", "--database-url", b.dsn)
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "--within")
}
