package e2e

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
)

// role is the role the pooled URL logs in as.
func (b *txPoolerBundle) role(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(b.pooled)
	require.NoError(t, err)
	return u.User.Username()
}

// sessionState counts what the role's server sessions (PgBouncer's) hold
// that a transaction pooler would hand to another client: a session
// advisory lock of the export (a transaction's lock of the relay's or of
// a marking transaction is not one), and a LISTEN.
func (b *txPoolerBundle) sessionState(t *testing.T) (advisory, listening int64) {
	t.Helper()
	ek := locks.ExportKey(b.schema, jobs.Resources)
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		  WHERE a.usename = $1 AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		    AND (l.classid, l.objid) = (($2::bigint >> 32) & 4294967295, $2::bigint & 4294967295)),
		(SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND query ILIKE 'LISTEN %')`,
		b.role(t), ek).Scan(&advisory, &listening))
	return advisory, listening
}

// With DATABASE_URL through PgBouncer in transaction mode and no
// SYNCER_DIRECT_URL, what it does with it (takeoverThroughPooler) works,
// the locks leases alone and the relay polling: no session advisory lock
// and no LISTEN on a pooled session, and the daemons release their leases
// as they stop.
func TestPgBouncerTransactionPoolingWithoutDirectURL(t *testing.T) {
	t.Parallel()
	b := setupTxPooler(t)
	b.takeoverThroughPooler(t, "transaction pooling without a direct URL", nil, func() {
		advisory, listening := b.sessionState(t)
		require.Zero(t, advisory, "no session advisory lock on a pooled session")
		require.Zero(t, listening, "no LISTEN on a pooled session")
	}, func() {
		_, held := b.holder(t)
		require.False(t, held, "the daemons released their leases as they stopped")
	})
}

// A tenant source of 4 lanes through PgBouncer in transaction mode without
// SYNCER_DIRECT_URL (tenantsThroughTxPooler), the lanes' locks leases
// alone. The daemon holds no direct session at all, and status counts its
// leases among its locks.
func TestTenantsThroughTransactionPoolingWithoutDirectURL(t *testing.T) {
	t.Parallel()
	w, tx, cmd, runErr := tenantsThroughTxPooler(t, false)
	var leases, direct int64
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM syncer_lock_leases WHERE holder IS NOT NULL AND expires_at > clock_timestamp()),
		(SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '% %:' || $1::text AND usename <> $2)`,
		strconv.Itoa(cmd.Process.Pid), tx.Role).Scan(&leases, &direct))
	t.Logf("without a direct URL: %d leases alone held, %d direct sessions", leases, direct)
	require.Positive(t, leases)
	require.Zero(t, direct, "no session of the daemon's but PgBouncer's")
	// status counts the daemon's leases alone among its locks.
	code, out, errOut := syncerCmd(t, "status", "--json", "--database-url", tx.Pooled)
	require.Equal(t, 0, code, "status: %s", errOut)
	var st struct {
		Sessions []struct{ Process, Locks int }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	var locksShown int
	for _, s := range st.Sessions {
		if s.Process == cmd.Process.Pid {
			locksShown = s.Locks
		}
	}
	require.Positive(t, locksShown, "status shows the daemon's leases: %s", out)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), runErr.String())
	require.NotContains(t, runErr.String(), "prepared statement")
}
