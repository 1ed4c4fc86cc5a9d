package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// TestBackgroundVerifyOfAConfiguredSource: a configured source whose
// destination has verify_every and verify_heal is verified by the daemon
// (its first run at once, the next ones asked for as the console's
// "Verify now" does); a lost and an edited row at the third party are
// found, healed through the export, and the next run is clean.
func TestBackgroundVerifyOfAConfiguredSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, fakethirdparty.Config{})
	crm := newDestination(t, fakethirdparty.Config{Lookup: true})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s
    verify_every: 1h
    verify_heal: true
sources:
  - table: orders
    key: id
    destination: crm
`, crm.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg; c.VerifyTick = 100 * time.Millisecond })
	b.exec(t, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 5) g`)
	b.waitSourcesDrained(t, "orders")

	runAfter := func(what string, asked time.Time) *verify.Last {
		t.Helper()
		var got *verify.Last
		waitFor(t, 60*time.Second, what, func() bool {
			last, err := verify.LastRuns(ctx, b.pool)
			require.NoError(t, err)
			got = last["orders"]
			return got != nil && got.State == verify.StateFinished && got.StartedAt.After(asked)
		})
		return got
	}
	crm.fake.ApplyDrift(fakethirdparty.Drift{Lose: []string{"1"}, Edit: map[string]json.RawMessage{"2": json.RawMessage(`{"id": 2, "status": "edited"}`)}})
	asked := time.Now()
	require.NoError(t, verify.Request(ctx, b.pool, "orders"))
	found := runAfter("the run asked for after the drift", asked)
	require.Equal(t, verify.Counts{KindCounts: verify.KindCounts{Checked: 5, OK: 3, Missing: 1, Stale: 1}, Healed: 2}, *found.Counts)
	require.Equal(t, verify.ByConsole, found.By)

	b.waitSourcesDrained(t, "orders")
	asked = time.Now()
	require.NoError(t, verify.Request(ctx, b.pool, "orders"))
	clean := runAfter("the run after the heal", asked)
	require.Equal(t, verify.Counts{KindCounts: verify.KindCounts{Checked: 5, OK: 5}}, *clean.Counts)
}
