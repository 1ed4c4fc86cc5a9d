package cli_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// tenantToken is the fake's token prefix: tenant T accepts only
// tenantToken+T, so a lookup with another tenant's token is refused.
const tenantToken = "tok-secret-verify-"

// Issue 44 with issue 43: `syncer verify --tenant` reads one tenant's rows
// against that tenant's own account (the URL and token of its connection
// row); drift in one tenant is reported for it only, healed for it, and
// verified clean, and no token is ever printed. Without --tenant, a
// source whose tenants have accounts of their own is refused.
func TestVerifyTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true, Tenants: fakethirdparty.TenantConfig{TokenPrefix: tenantToken}})
	// interrupt, when set, is called after acme's second lookup from
	// then on: its first page's progress is saved.
	var interrupt atomic.Pointer[context.CancelFunc]
	var acmeLookups atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.ServeHTTP(w, r)
		if r.URL.Path == "/t/acme/v1/lookup" && acmeLookups.Add(1) >= 2 {
			if f := interrupt.Swap(nil); f != nil {
				(*f)()
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)

	tt := startTwoTenants(t, ctx, fake, srv.URL, "", "--log-level", "debug")
	args := tt.args
	var out strings.Builder
	out.WriteString(tt.migrated.stdout + tt.migrated.stderr)
	do := func(cmd ...string) result {
		r := run(ctx, append(cmd, args...)...)
		out.WriteString(r.stdout + r.stderr)
		return r
	}
	verifyCmd := func(more ...string) result {
		return do(append([]string{"verify", "--source", "orders", "--lookup-size", "3"}, more...)...)
	}

	// Once exported, each tenant reads clean from its own account.
	for _, tenant := range []string{"acme", "globex"} {
		require.Eventually(t, func() bool { return verifyCmd("--tenant", tenant).code == 0 }, 10*time.Second, 50*time.Millisecond)
		r := verifyCmd("--tenant", tenant, "--json")
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		v := verifyJSON(t, r)
		require.Equal(t, [3]int64{10, 10, 0}, [3]int64{v.Checked, v.OK, v.Pending}, r.stdout)
		require.Contains(t, r.stdout, `"tenant":"`+tenant+`"`)
	}

	// acme's account drifts: 1 lost, 3 edited.
	resp, err := http.Post(srv.URL+"/t/acme/v1/admin/drift", "application/json",
		strings.NewReader(`{"lose": ["1"], "edit": {"3": {"id": 3, "status": "edited there"}}}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	r := verifyCmd("--tenant", "acme", "--json")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [4]int64{10, 8, 1, 1}, [4]int64{v.Checked, v.OK, v.Missing, v.Stale})
	kinds := map[string]string{}
	for _, ex := range v.Examples {
		kinds[ex.ID] = ex.Kind
	}
	require.Equal(t, map[string]string{"1": "missing", "3": "stale"}, kinds)
	// globex is not touched by acme's drift.
	r = verifyCmd("--tenant", "globex")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "source orders tenant globex: 10 keys checked: 10 ok, 0 missing, 0 stale, 0 zombie, 0 failed, 0 unknown, 0 pending\nnothing drifted\n")

	// Heal: acme's two keys are pending again for acme, sent to acme's
	// account by the daemon, and acme verifies clean.
	acmeBefore, globexBefore := len(fake.TenantDeliveries("acme")), len(fake.TenantDeliveries("globex"))
	r = verifyCmd("--tenant", "acme", "--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "2 drifted keys are pending again: the running daemons send them\n")
	require.Eventually(t, func() bool { return len(fake.TenantDeliveries("acme")) >= acmeBefore+2 }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		r = verifyCmd("--tenant", "acme", "--json")
		return r.code == 0
	}, 30*time.Second, 100*time.Millisecond, r.stdout+r.stderr)
	v = verifyJSON(t, r)
	require.Equal(t, [3]int64{10, 10, 0}, [3]int64{v.Checked, v.OK, v.Missing + v.Stale + v.Zombie})
	require.Equal(t, globexBefore, len(fake.TenantDeliveries("globex")), "nothing resent to globex")
	healed := map[int64]bool{}
	for _, d := range fake.TenantDeliveries("acme")[acmeBefore:] {
		healed[d.ID] = true
	}
	require.Equal(t, map[int64]bool{1: true, 3: true}, healed)

	// Each tenant has its own cursor: acme interrupted after its second
	// lookup resumes where it stopped, and globex's run meanwhile neither
	// resumes acme's nor drops it.
	runCtx2, cancel := context.WithCancel(ctx)
	acmeLookups.Store(0)
	interrupt.Store(&cancel)
	r = run(runCtx2, append([]string{"verify", "--source", "orders", "--lookup-size", "3", "--tenant", "acme"}, args...)...)
	out.WriteString(r.stdout + r.stderr)
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "interrupted; run it again to resume")
	r = verifyCmd("--tenant", "globex")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.NotContains(t, r.stdout, "resumed")
	r = verifyCmd("--tenant", "acme")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "source orders tenant acme: resumed the interrupted verify\n")
	require.Contains(t, r.stdout, "source orders tenant acme: 10 keys checked: 10 ok")

	// A tenant with no connection row has no account to read.
	r = verifyCmd("--tenant", "initech")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "tenant initech has no connection row")

	require.NotContains(t, out.String(), tenantToken, "no token in verify's output")
}
