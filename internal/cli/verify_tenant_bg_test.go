package cli_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// Issue 44 with issue 43: verify_every on a destination with a tenants
// block verifies each tenant against its own account in the background;
// drift in one tenant's account is healed with verify_heal, and the
// source's last run counts every tenant's keys.
func TestBackgroundVerifyTenantsHeals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true, Tenants: fakethirdparty.TenantConfig{TokenPrefix: tenantToken}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)

	b := startTwoTenants(t, ctx, fake, srv.URL, "    verify_every: 1h\n    verify_heal: true\n").b

	// last waits for the source's last run to be ok, asking for runs
	// while none under way began after since.
	last := func(what string, since time.Time, ok func(*verify.Last) bool) *verify.Last {
		var got *verify.Last
		require.Eventually(t, func() bool {
			runs, err := verify.LastRuns(ctx, b.pool)
			require.NoError(t, err)
			got = runs["orders"]
			if got != nil && ok(got) {
				return true
			}
			// "Verify now", as the console asks: the period is an hour. A
			// run under way that began before since is no answer (the
			// periodic one begun at the daemon's start, before the rows
			// synced, spreads its lookups over half an hour): the request
			// hurries it, and the run asked for follows it.
			current := got != nil && got.State == verify.StateRunning && got.StartedAt.After(since)
			if got == nil || (!got.Requested() && !current) {
				require.NoError(t, verify.Request(ctx, b.pool, "orders"))
			}
			return false
		}, 60*time.Second, 200*time.Millisecond, what)
		return got
	}
	synced := time.Now()
	clean := last("a clean run of both tenants", synced, func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.StartedAt.After(synced) && l.Counts.Pending == 0
	})
	require.Equal(t, verify.Counts{KindCounts: verify.KindCounts{Checked: 20, OK: 20}}, *clean.Counts)

	// acme's account drifts: 1 lost, 3 edited.
	resp, err := http.Post(srv.URL+"/t/acme/v1/admin/drift", "application/json",
		strings.NewReader(`{"lose": ["1"], "edit": {"3": {"id": 3, "status": "edited there"}}}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	drifted := time.Now()
	found := last("a run after the drift", drifted, func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.StartedAt.After(drifted)
	})
	require.Equal(t, [3]int64{1, 1, 2}, [3]int64{found.Counts.Missing, found.Counts.Stale, found.Counts.Healed}, "counts %+v", *found.Counts)
	healed := last("a clean run once acme's rows were sent again", *found.FinishedAt, func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.FinishedAt.After(*found.FinishedAt) && l.Counts.Drifted() == 0 && l.Counts.Pending == 0
	})
	require.Equal(t, int64(20), healed.Counts.OK)
}
