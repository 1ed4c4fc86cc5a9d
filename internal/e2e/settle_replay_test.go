package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// A replay's pass reads each row once, so a row its answer defers (an
// Elasticsearch item's 503) cannot wait in the replay for its turn: it is
// handed to the live export, pending again there and held there while the
// third party keeps deferring it, and it arrives once accepted. The replay
// delivers every row of its range; its neighbours go once.
func TestReplayDeferredRowGoesThroughTheLiveExport(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	r := newPerItemReceiver(map[string]int{})
	url := newRecvHandler(t, r.bulk(t))
	b.startDaemon(t, func(c *daemon.Config) {
		c.ThirdParty.URL = url + "/orders"
		c.Format = formats.Spec{Name: "elasticsearch"}
		c.Delivery = settleDelivery
	})
	_, err := b.pool.Exec(t.Context(), `INSERT INTO resources (payload) SELECT '{}' FROM generate_series(1, 7)`)
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "the rows exported", func() bool { return b.report(t).Unsynced == 0 })

	r.set("5", 503)
	b.syncer(t, "replay", "--from-id", "1", "--to-id", "7", "--wait")
	got, _, _ := r.counts()
	for _, id := range []string{"1", "2", "3", "4", "6", "7"} {
		require.Equal(t, 2, got[id], "row %s: once exported, once replayed", id)
	}
	waitFor(t, 10*time.Second, "the deferred row pending and held in the live export", func() bool {
		_, ok := b.heldOf(t, "resources")["5"]
		return ok && b.report(t).Unsynced == 1
	})

	r.set("5", 0)
	waitFor(t, 20*time.Second, "the deferred row taken once the third party accepts it", func() bool {
		return b.report(t).Unsynced == 0
	})
	got, _, _ = r.counts()
	for _, id := range []string{"1", "2", "3", "4", "6", "7"} {
		require.Equal(t, 2, got[id], "row %s is not sent again for its neighbour", id)
	}
	require.Empty(t, b.heldOf(t, "resources"))
}
