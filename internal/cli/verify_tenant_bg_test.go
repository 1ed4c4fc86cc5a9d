package cli_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/fakethirdparty"
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

	b := setup(t, false)
	_, err := b.pool.Exec(ctx, `CREATE TABLE orders (id integer PRIMARY KEY, account text NOT NULL, status text NOT NULL);
		CREATE TABLE connections (account text PRIMARY KEY, url text NOT NULL, token text NOT NULL)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO connections VALUES ('acme', $1 || '/t/acme', $2 || 'acme'), ('globex', $1 || '/t/globex', $2 || 'globex')`,
		srv.URL, tenantToken)
	require.NoError(t, err)
	yaml := fmt.Sprintf(`destinations:
  crm:
    url: %s/t/{tenant}
    verify_every: 1h
    verify_heal: true
    tenants:
      query: SELECT url, token FROM connections WHERE account = $1
sources:
  - {table: orders, key: id, destination: crm, tenant: account, lanes: 4, columns: [id, status]}
`, srv.URL)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))
	args := []string{"--database-url", b.dsn, "--config", cfg}
	r := run(ctx, append([]string{"migrate"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	_, err = b.pool.Exec(ctx, `INSERT INTO orders SELECT g, CASE WHEN g % 2 = 1 THEN 'acme' ELSE 'globex' END, 'new'
		FROM generate_series(1, 20) g`)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() { done <- run(runCtx, append([]string{"run", "--http-addr", "off"}, args...)...) }()
	t.Cleanup(func() {
		stop()
		r := <-done
		require.NotContains(t, r.stdout+r.stderr, tenantToken, "the daemon's output holds no token")
	})
	require.Eventually(t, func() bool {
		return len(fake.TenantDeliveries("acme")) == 10 && len(fake.TenantDeliveries("globex")) == 10
	}, 30*time.Second, 50*time.Millisecond)

	last := func(what string, ok func(*verify.Last) bool) *verify.Last {
		var got *verify.Last
		require.Eventually(t, func() bool {
			runs, err := verify.LastRuns(ctx, b.pool)
			require.NoError(t, err)
			got = runs["orders"]
			if got != nil && ok(got) {
				return true
			}
			// "Verify now", as the console asks: the period is an hour.
			if got == nil || (got.State != verify.StateRunning && !got.Requested()) {
				require.NoError(t, verify.Request(ctx, b.pool, "orders"))
			}
			return false
		}, 60*time.Second, 200*time.Millisecond, what)
		return got
	}
	synced := time.Now()
	clean := last("a clean run of both tenants", func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.StartedAt.After(synced) && l.Counts.Pending == 0
	})
	require.Equal(t, verify.Counts{Checked: 20, OK: 20}, *clean.Counts)

	// acme's account drifts: 1 lost, 3 edited.
	resp, err := http.Post(srv.URL+"/t/acme/v1/admin/drift", "application/json",
		strings.NewReader(`{"lose": ["1"], "edit": {"3": {"id": 3, "status": "edited there"}}}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	drifted := time.Now()
	found := last("a run after the drift", func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.StartedAt.After(drifted)
	})
	require.Equal(t, [3]int64{1, 1, 2}, [3]int64{found.Counts.Missing, found.Counts.Stale, found.Counts.Healed}, "counts %+v", *found.Counts)
	healed := last("a clean run once acme's rows were sent again", func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.FinishedAt.After(*found.FinishedAt) && l.Counts.Drifted() == 0 && l.Counts.Pending == 0
	})
	require.Equal(t, int64(20), healed.Counts.OK)
}
