package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 54's leftover: a connection revoked (its row deleted) holds the
// tenant's very next batch, not one 30 to 45 s later: the daemon reads a
// held tenant's row right before a batch once its last read is a second
// old. The other tenant goes on.
func TestRevokedConnectionHoldsTheNextBatchThroughADaemon(t *testing.T) {
	t.Parallel()
	w := newTenantWorld(t, fakethirdparty.Config{})
	for _, tn := range []string{"t1", "t2"} {
		w.exec(t, `INSERT INTO crm_connections VALUES ($1, 'tok-' || $1)`, tn)
	}
	cfg := w.config(t, w.fakeURL, 2)
	_, runErr := w.run(t, w.dsn, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", runErr.String())
		}
	})
	w.exec(t, `INSERT INTO contacts (id, account) SELECT g, 't' || ((g - 1) % 2 + 1) FROM generate_series(1, 20) g`)
	waitFor(t, time.Minute, "both tenants' rows", func() bool { return w.holds("t1", 10, nil) && w.holds("t2", 10, nil) })

	// t1's customer disconnects; a second later (the read before a batch
	// stands a second) both tenants get a row.
	w.exec(t, `DELETE FROM crm_connections WHERE account_id = 't1'`)
	time.Sleep(1500 * time.Millisecond)
	w.exec(t, `INSERT INTO contacts (id, account) VALUES (101, 't1'), (102, 't2')`)
	waitFor(t, time.Minute, "t2's new row", func() bool { return w.holds("t2", 11, nil) })
	time.Sleep(3 * time.Second) // t1's lane had its turn too
	_, sent := w.latest("t1")[101]
	require.False(t, sent, "the disconnected tenant's row went with the credentials held")
	require.Equal(t, int64(1), w.sourceStats(t)["contacts"].PendingKeys, "its row waits")
}
