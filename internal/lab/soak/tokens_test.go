package soak

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// Issue 54, seed 439617995: the connections table locked for 40 s held the
// reconnection of a tenant the soak revoked at 15 s, and the soak revoked
// the same tenant again at 30 s. Each reconnection starts a new family at
// the token endpoint and then writes its first token to the tenant's row;
// both waited on the table, and the older family's token was written last:
// the row gave a token the endpoint no longer knew, and every grant of the
// tenant was refused ("unknown refresh token", no reuse) for the rest of
// the run. Here the same, in the order that crosses them: a second
// reconnection of the tenant while the first waits on the table, the table
// let go while the second holds the tenant's refresh lock. The row must
// end with a token the endpoint grants.
func TestReconnectionsOfATenantDoNotCross(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a revocation's 5 s twice")
	}
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, ticketsSQL)
	require.NoError(t, err)
	crm := newAPI(1, "")
	t.Cleanup(crm.close)
	r := &run{cfg: (&Config{}).withDefaults(), pool: pool, crm: crm, start: time.Now()}
	r.setupTenants()
	const tenant = "k2"

	// The table locked, as the connections-lock fault does.
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE ticket_connections IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	// holder is the session holding the tenant's refresh lock, 0 for none.
	class, key := tenants.RefreshLock(ticketDestination, tenant)
	holder := func() int32 {
		var pid int32
		err := pool.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 2`, int64(uint32(class)), int64(uint32(key))).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	waitFor := func(what string, within time.Duration, ok func(pid int32) bool) int32 {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if pid := holder(); ok(pid) {
				return pid
			}
		}
		t.Fatalf("%s: not within %s", what, within)
		return 0
	}

	first := r.reconnect(ctx, tenant, "tok-k2-1")
	require.NotNil(t, first)
	// Past its 5 s of revocation, the first reconnection holds the lock,
	// has started its family and waits on the table.
	p1 := waitFor("the first reconnection holds the tenant's refresh lock", 10*time.Second, func(pid int32) bool { return pid != 0 })
	second := r.reconnect(ctx, tenant, "tok-k2-2")
	if second != nil {
		// Its 5 s of revocation, then the lock the first gives up after
		// its try's 5 s: it starts a second family and waits on the table.
		waitFor("the second reconnection holds the tenant's refresh lock", 15*time.Second, func(pid int32) bool { return pid != 0 && pid != p1 })
	}
	require.NoError(t, lock.Rollback(ctx))
	for _, done := range []<-chan struct{}{first, second} {
		if done == nil {
			continue
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("a reconnection did not end within a minute")
		}
	}

	var stored string
	require.NoError(t, pool.QueryRow(ctx, `SELECT refresh_token FROM ticket_connections WHERE tenant = $1`, tenant).Scan(&stored))
	resp, err := http.PostForm(crm.url()+"/t/"+tenant+"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {stored}})
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the refresh token the row gives (%s) is one the endpoint grants: %s", familyName(stored), body)
}
