package exporter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two daemons' exporters share a source's lanes: each takes about its
// share (Config.Peers), and every tenant's rows arrive once each.
func TestTenantLanesSharedByTwoDaemons(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 8, nil)
	one, two := &tenantDests{url: b.url}, &tenantDests{url: b.url}
	b.daemon(t, one, time.Second, 2)
	b.daemon(t, two, time.Second, 2)
	for round := range 6 {
		from := round * 400
		b.exec(t, `INSERT INTO contacts SELECT i, 'c' || (i % 40), 'x' FROM generate_series($1::int + 1, $1::int + 400) i`, from)
		time.Sleep(300 * time.Millisecond)
	}
	b.requireDelivered(t, 40, 2400)
	requireShares(t, one.pushes.Load(), two.pushes.Load(), 0.2)
}

// A backlog written at once while two daemons run: the River of one
// fetches every lane's job in one go, as `syncer run` (100 workers) does,
// and takes its share of them, not all: the others snooze to the other
// daemon. Counting only the lanes already running let the first daemon
// take all 16 (the two daemons row of syncer-lab bench). Each takes
// more than a fifth: a loaded machine gave one daemon 0.275 of them.
func TestTenantLanesBacklogSharedByTwoDaemons(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 16, nil)
	b.workers = 64
	one, two := &tenantDests{url: b.url}, &tenantDests{url: b.url}
	// A run limit longer than the test: a lane stays where it started.
	b.daemon(t, one, time.Minute, 2)
	b.daemon(t, two, time.Minute, 2)
	time.Sleep(500 * time.Millisecond) // both Rivers fetching
	b.exec(t, `INSERT INTO contacts SELECT i, 'c' || (i % 160), 'x' FROM generate_series(1, 4800) i`)
	b.requireDelivered(t, 160, 4800)
	requireShares(t, one.pushes.Load(), two.pushes.Load(), 0.2)
}

// requireDelivered waits until the accounts of tenants c0… hold n rows,
// each once and in order. It asks what was delivered, not how fast: the
// backlog's 64,000 rows took 67-70 s under -race on a loaded machine, so
// it waits 3 minutes, and looks every half second (each look reads every
// delivery of every account, work the drain competed with at 50 ms).
func (b *tenantBundle) requireDelivered(t *testing.T, tenants, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		got := 0
		for i := range tenants {
			got += len(b.latest(fmt.Sprintf("c%d", i)))
		}
		return got == n
	}, 3*time.Minute, 500*time.Millisecond)
	st := b.fake.TenantStats().Total
	require.Zero(t, st.KeyConflicts)
	require.Zero(t, st.OutOfOrder)
	require.Equal(t, int64(n), st.DistinctPairs, "each row sent once")
}

// requireShares checks that each of two daemons pushed more than least
// of the batches.
func requireShares(t *testing.T, one, two int64, least float64) {
	t.Helper()
	t.Logf("batches pushed: first daemon %d, second %d", one, two)
	total := float64(one + two)
	require.Greater(t, float64(one)/total, least, "the first daemon took its share of lanes")
	require.Greater(t, float64(two)/total, least, "the second daemon took its share of lanes")
}

// A daemon starts while another runs every lane of a busy source: it
// takes its share within seconds, long before the lanes' run limit (a
// minute here), as the first gives lanes up one at a time; nothing is
// sent twice or out of order on the way. The source is busy with a
// trickle (its lanes poll, hot) or with a backlog (they drain pass after
// pass).
func TestTenantLanesTakenBySecondDaemon(t *testing.T) {
	t.Parallel()
	for _, backlog := range []bool{false, true} {
		// One after the other: two daemons of 16 lanes each hold about 40
		// server sessions, and both cases at once beside the package's
		// other tests took the server past its 100 connections in CI.
		t.Run(map[bool]string{false: "trickle", true: "backlog"}[backlog], func(t *testing.T) {
			testSecondDaemon(t, backlog)
		})
	}
}

func testSecondDaemon(t *testing.T, backlog bool) {
	const tenants = 80
	var slow map[string]time.Duration
	if backlog {
		// 800 rows a tenant in batches of 10, each answered in 250 ms:
		// a drain of 20 s or more, the shares measured in its middle.
		slow = map[string]time.Duration{}
		for i := range tenants {
			slow[fmt.Sprintf("c%d", i)] = 250 * time.Millisecond
		}
	}
	b := tenantSetup(t, 16, slow)
	// As `syncer run` does: every lane's job lingers, so a lane changes
	// daemon only when its job ends.
	b.workers, b.lingering = 64, 63
	if backlog {
		b.batch = 10
	}
	one, two := &tenantDests{url: b.url}, &tenantDests{url: b.url}
	peers := &atomic.Int64{}
	peers.Store(1)
	b.daemonPeers(t, one, time.Minute, peers)

	ctx, stop := context.WithCancel(context.Background())
	written := make(chan int, 1)
	if backlog {
		b.exec(t, `INSERT INTO contacts SELECT i, 'c' || (i % $1::int), 'x' FROM generate_series(1, $1::int * 800) i`, tenants)
		written <- tenants * 800
	} else {
		// A writer: a row to each tenant every 50 ms.
		go func() {
			next := 0
			for ctx.Err() == nil {
				_, err := b.pool.Exec(ctx, `INSERT INTO contacts SELECT i, 'c' || (i % $2::int), 'x' FROM generate_series($1::int, $1::int + $2::int - 1) i`, next, tenants)
				if err != nil {
					break
				}
				next += tenants
				time.Sleep(50 * time.Millisecond)
			}
			written <- next
		}()
	}
	t.Cleanup(stop)
	require.Eventually(t, func() bool { return one.pushes.Load() >= 100 }, 30*time.Second, 20*time.Millisecond)

	b.daemonPeers(t, two, time.Minute, peers)
	peers.Store(2)
	joined := time.Now()
	require.Eventually(t, func() bool { return two.pushes.Load() >= 50 }, 20*time.Second, 20*time.Millisecond,
		"the second daemon sends within seconds of its start")
	t.Logf("the second daemon sent 50 batches %s after it started", time.Since(joined).Round(100*time.Millisecond))
	time.Sleep(time.Second)
	a0, b0 := one.pushes.Load(), two.pushes.Load()
	time.Sleep(2 * time.Second)
	a1, b1 := one.pushes.Load(), two.pushes.Load()
	t.Logf("over 2 s, %s after the second daemon started:", time.Since(joined).Round(time.Second))
	// Each daemon runs half the lanes; the lanes' tenants (80 hashed to
	// 16) are uneven, and so are their batches: a fifth each says the
	// lanes are shared, where the second daemon sent none before the
	// share (until the lanes' run limit, a minute here).
	requireShares(t, a1-a0, b1-b0, 0.2)

	stop()
	<-written
	// The table's count, not the writer's: an insert whose context was
	// cancelled as it committed counts there.
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM contacts`).Scan(&n))
	b.requireDelivered(t, tenants, n)
}
