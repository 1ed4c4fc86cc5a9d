package cli_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 54 point 15 (docs/protocol.md section 10): a configured source forgets a key
// hard-deleted here once its tombstone was accepted, so verify, reading
// the table, never saw it again (0 zombie) when the third party held it
// once more. The row's story still names it: verify reads it back, finds
// it a zombie, and --heal sends its tombstone again.
func TestVerifyZombieOfAHardDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, fake, _, db := ordersBehindAFake(t, `destinations:
  crm:
    url: %s
sources:
  - {table: orders, key: id, destination: crm, columns: [id, status]}
`)
	var r result
	_, err := b.pool.Exec(ctx, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 12) g`)
	require.NoError(t, err)
	startDaemon(t, ctx, db...)
	require.Eventually(t, func() bool { return len(fake.Deliveries()) == 12 }, 30*time.Second, 50*time.Millisecond)

	// 5 and 11 deleted here: their tombstones are accepted, and the table
	// no longer holds them.
	_, err = b.pool.Exec(ctx, `DELETE FROM orders WHERE id IN (5, 11)`)
	require.NoError(t, err)
	tombstones := func() int {
		n := 0
		for _, d := range fake.Deliveries() {
			if d.Deleted && (d.ID == 5 || d.ID == 11) {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return tombstones() == 2 }, 30*time.Second, 50*time.Millisecond)
	verifyCmd := func(args ...string) result {
		return run(ctx, append(append([]string{"verify", "--source", "orders", "--lookup-size", "5"}, args...), db...)...)
	}
	require.Eventually(t, func() bool {
		r = verifyCmd("--json")
		return r.code == 0 && verifyJSON(t, r).Pending == 0
	}, 30*time.Second, 100*time.Millisecond, "%v", &r)
	v := verifyJSON(t, r)
	require.Equal(t, [3]int64{12, 12, 0}, [3]int64{v.Checked, v.OK, v.Zombie}, "the two graves are read back, deleted there")

	// A person re-creates 5 there: a zombie, read back from the story.
	fake.ApplyDrift(fakethirdparty.Drift{Recreate: map[string]json.RawMessage{"5": json.RawMessage(`{"id": 5, "status": "new"}`)}})
	r = verifyCmd("--json")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v = verifyJSON(t, r)
	require.Equal(t, [4]int64{12, 11, 1, 0}, [4]int64{v.Checked, v.OK, v.Zombie, v.Missing}, r.stdout)
	require.Len(t, v.Examples, 1)
	require.Equal(t, "5", v.Examples[0].ID)
	require.Equal(t, "zombie", v.Examples[0].Kind)
	require.JSONEq(t, `{"deleted": true}`, string(v.Examples[0].Here))

	// --heal sends its tombstone again, through the daemon.
	r = verifyCmd("--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "1 drifted keys are pending again")
	require.Eventually(t, func() bool { return tombstones() == 3 }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		r = verifyCmd("--json")
		return r.code == 0 && verifyJSON(t, r).OK == 12
	}, 30*time.Second, 100*time.Millisecond, "%v", &r)

	// A range bounds the graves too.
	r = verifyCmd("--json", "--from-key", "6", "--to-key", "12")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Equal(t, int64(7), verifyJSON(t, r).Checked, "6..12 less 11 deleted, and 11 from the story")
}

// Issue 54 point 15 (docs/protocol.md section 10): a key whose latest version the
// third party rejected was counted missing (or stale, when an earlier
// version was accepted), so drift never cleared and --heal only got it
// rejected again. It is failed: a count and a kind of its own, not drift,
// left alone by --heal.
func TestVerifyFailedIsItsOwnKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, true)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true, RejectField: "bad"})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	db := []string{"--database-url", b.dsn, "--log-level", "error", "--thirdparty-url", srv.URL}
	b.fill(t, 6)
	// 3 is rejected from the start; 4 is accepted, then rejected.
	_, err := b.pool.Exec(ctx, `UPDATE resources SET payload = '{"bad": 3}' WHERE id = 3`)
	require.NoError(t, err)
	startDaemon(t, ctx, db...)
	settled := func(n int) func() bool {
		return func() bool {
			var left int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM resources WHERE synced_at IS NULL AND failed_at IS NULL`).Scan(&left))
			var failed int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM resources WHERE failed_at IS NOT NULL`).Scan(&failed))
			return left == 0 && failed == n
		}
	}
	require.Eventually(t, settled(1), 30*time.Second, 50*time.Millisecond)
	_, err = b.pool.Exec(ctx, `UPDATE resources SET payload = '{"bad": 4}' WHERE id = 4`)
	require.NoError(t, err)
	require.Eventually(t, settled(2), 30*time.Second, 50*time.Millisecond)

	verifyCmd := func(args ...string) result {
		return run(ctx, append(append([]string{"verify", "--source", "resources"}, args...), db...)...)
	}
	r := verifyCmd("--json")
	require.Equal(t, 0, r.code, "failed is not drift: "+r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [5]int64{6, 4, 0, 0, 2}, [5]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Failed}, r.stdout)
	kinds := map[string]string{}
	for _, ex := range v.Examples {
		kinds[ex.ID] = ex.Kind
	}
	require.Equal(t, map[string]string{"3": "failed", "4": "failed"}, kinds)

	var versions [2]int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT version FROM resources WHERE id = 3), (SELECT version FROM resources WHERE id = 4)`).Scan(&versions[0], &versions[1]))
	r = verifyCmd("--heal")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "6 keys checked: 4 ok, 0 missing, 0 stale, 0 zombie, 2 failed, 0 unknown, 0 pending\n")
	require.Contains(t, r.stdout, "2 keys failed (the third party rejected their latest version): --heal leaves them")
	require.Contains(t, r.stdout, "syncer retry-failed\n")
	var after [2]int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT version FROM resources WHERE id = 3), (SELECT version FROM resources WHERE id = 4)`).Scan(&after[0], &after[1]))
	require.Equal(t, versions, after, "--heal does not send a failed key to be rejected again")
}

// Issue 54 point 15 (docs/protocol.md section 10): `verify --source S` of a source whose
// destination has tenants exited 2 asking for --tenant, one at a time. It
// verifies every tenant with rows, one after another, each with its own
// account; --json gives each tenant's counts under "tenants" and their sums
// at the top; a tenant with rows but no connection row is said to be
// skipped; status shows each tenant's last verify.
func TestVerifyEveryTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true, Tenants: fakethirdparty.TenantConfig{TokenPrefix: tenantToken}})
	var mu sync.Mutex
	var lookups []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/lookup") {
			mu.Lock()
			lookups = append(lookups, r.URL.Path+" "+r.Header.Get("Authorization"))
			mu.Unlock()
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	tt := startTwoTenants(t, ctx, fake, srv.URL, "")
	verifyCmd := func(more ...string) result {
		return run(ctx, append(append([]string{"verify", "--source", "orders", "--lookup-size", "3"}, more...), tt.args...)...)
	}
	var r result
	require.Eventually(t, func() bool {
		r = verifyCmd("--json")
		return r.code == 0 && verifyJSON(t, r).OK == 20
	}, 30*time.Second, 100*time.Millisecond, "%v", &r)
	v := verifyJSON(t, r)
	require.Equal(t, [3]int64{20, 20, 0}, [3]int64{v.Checked, v.OK, v.Pending})
	require.Len(t, v.Tenants, 2, r.stdout)
	for i, tenant := range []string{"acme", "globex"} {
		require.Equal(t, tenant, v.Tenants[i].Tenant)
		require.Equal(t, [2]int64{10, 10}, [2]int64{v.Tenants[i].Checked, v.Tenants[i].OK})
	}
	// Each tenant was read from its own account only.
	mu.Lock()
	for _, l := range lookups {
		require.Regexp(t, `^/t/(acme/v1/lookup Bearer `+tenantToken+`acme|globex/v1/lookup Bearer `+tenantToken+`globex)$`, l)
	}
	mu.Unlock()

	// acme drifts; a third tenant has a row and no account.
	resp, err := http.Post(srv.URL+"/t/acme/v1/admin/drift", "application/json", strings.NewReader(`{"lose": ["1"]}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	_, err = tt.b.pool.Exec(ctx, `INSERT INTO orders VALUES (21, 'initech', 'new')`)
	require.NoError(t, err)
	r = verifyCmd()
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "source orders tenant acme: 10 keys checked: 9 ok, 1 missing, 0 stale, 0 zombie, 0 failed, 0 unknown, 0 pending\n")
	require.Contains(t, r.stdout, "source orders tenant globex: 10 keys checked: 10 ok, 0 missing")
	require.Contains(t, r.stdout, "source orders: 20 keys checked: 19 ok, 1 missing")
	require.Contains(t, r.stdout, "  missing 1 (tenant acme): here")
	require.Contains(t, r.stdout, "syncer verify --source orders --heal makes them pending again")
	require.Contains(t, r.stderr, "source orders tenant initech: not verified: destination crm: tenant initech has no connection row")

	r = run(ctx, "status", "--database-url", tt.b.dsn)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Regexp(t, `verify orders\s+last finished \S+: 20 checked, 19 ok, 1 missing`, r.stdout)
	require.Regexp(t, `verify orders tenant acme\s+last finished \S+: 10 checked, 9 ok, 1 missing, .*: DRIFT \(command\)`, r.stdout)
	require.Regexp(t, `verify orders tenant globex\s+last finished \S+: 10 checked, 10 ok, 0 missing`, r.stdout)
	r = run(ctx, "status", "--json", "--database-url", tt.b.dsn)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	var st struct {
		Sources []struct {
			Name          string `json:"name"`
			VerifyTenants []struct {
				Tenant string           `json:"tenant"`
				State  string           `json:"state"`
				Counts map[string]int64 `json:"counts"`
			} `json:"verify_tenants"`
		} `json:"sources"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Sources, 1)
	require.Len(t, st.Sources[0].VerifyTenants, 2)
	require.Equal(t, "acme", st.Sources[0].VerifyTenants[0].Tenant)
	require.Equal(t, int64(1), st.Sources[0].VerifyTenants[0].Counts["missing"])
	require.NotContains(t, r.stdout, tenantToken)
}

// Issue 54 point 15 (docs/protocol.md section 10): `syncer verify` from the command line
// paced itself apart from the daemons, at a quarter of rate_limit while
// rows were pending, on top of the export's whole rate limit (19-20
// requests in 2 s against rate_limit 8). It shares the destination's rate
// with the export: while a daemon drains a backlog at rate_limit 8 and the
// verify reads, every request the fake third party received between the
// verify's first lookup and its last (batches and lookups together) stays
// within 8 a second (plus the burst of 1 and one in flight), and the
// lookups within a quarter of it.
func TestVerifyFromTheCommandLineSharesTheRateLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupSynced(t, 16)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	var mu sync.Mutex
	var batches, lookups []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		mu.Lock()
		if strings.HasSuffix(r.URL.Path, "/v1/lookup") {
			lookups = append(lookups, at)
		} else {
			batches = append(batches, at)
		}
		mu.Unlock()
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	limits := []string{"--rate-limit", "8", "--rate-burst", "1"}
	db := []string{"--database-url", b.dsn, "--log-level", "error", "--thirdparty-url", srv.URL}
	// A backlog the export drains a row a request for 50 s at most.
	_, err := b.pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(17, 416) g`)
	require.NoError(t, err)
	startDaemon(t, ctx, append(append(db, limits...), "--batch-size", "1")...)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) >= 8
	}, 30*time.Second, 50*time.Millisecond, "the export drains the backlog")

	r := run(ctx, append(append([]string{"verify", "--source", "resources", "--lookup-size", "1", "--to-key", "16", "--json"}, db...), limits...)...)
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, int64(16), v.Missing, "the 16 rows marked synced were never sent")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 16, len(lookups))
	first, last := lookups[0], lookups[len(lookups)-1]
	in := 0
	for _, at := range append(append([]time.Time{}, batches...), lookups...) {
		if !at.Before(first) && !at.After(last) {
			in++
		}
	}
	span := last.Sub(first).Seconds()
	t.Logf("%d requests (%d lookups) in %.1f s: %.2f/s", in, len(lookups), span, float64(in)/span)
	require.LessOrEqual(t, float64(in), 8*span+3, "export and verify together within rate_limit 8 (burst 1, one in flight, one at each end)")
	require.LessOrEqual(t, float64(len(lookups)-1), 8*0.25*span+1, "the lookups within a quarter of it while rows are pending")
}
