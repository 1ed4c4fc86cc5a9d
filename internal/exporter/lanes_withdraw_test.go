package exporter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 54: a lane's pass ends every PassLength, and a pass ends only
// once every push is answered. A paced tenant's batches are handed over
// up to its read-ahead before their tokens, so each pass end waited for
// the last of them, every tenant's, while the lane read nothing: under
// load its tenants at 10/s stopped 300-700 ms at each pass end, 0.73-0.84x
// of their limit in the bench. Now the batches still waiting for their
// tokens when the pass's time is up are withdrawn (their tokens given
// back, nothing of them sent) and their rows read again by the next
// pass: every row still reaches its account once, under one key.
//
// A pass whose end nothing waits for goes on (lanepass.go): the
// unconnected tenant w2, left out until the pass's end, makes each pass
// end at its time here.
func TestLanePassEndWithdrawsBatchesWaitingForTokens(t *testing.T) {
	const backlog = 7 // seconds at 2/s: three pass ends
	b := tenantSetup(t, 1, nil)
	b.batch = 10
	b.exec(t, `INSERT INTO contacts SELECT i, CASE WHEN i % 2 = 0 THEN 'w0' ELSE 'w1' END, 'x'
		FROM generate_series(1, $1::int) i`, 2*2*backlog*10)
	b.exec(t, `INSERT INTO contacts VALUES (0, 'w2', 'x')`)
	dests := &tenantDests{url: b.url, rateLimit: 2, unconnected: map[string]bool{"w2": true}}
	b.daemon(t, dests, 0, 1)
	require.Eventually(t, func() bool { return b.pending(t, "w0")+b.pending(t, "w1") == 0 }, time.Minute, 100*time.Millisecond)

	st := b.fake.TenantStats().Total
	require.EqualValues(t, 2*2*backlog*10, st.DistinctPairs, "every row reached its account")
	require.Zero(t, st.DuplicatePairs, "none twice")
	require.Greater(t, dests.pushes.Load(), st.Requests,
		"a batch waiting for its token at a pass end was withdrawn, not sent (%d batches handed over, %d requests)", dests.pushes.Load(), st.Requests)
}

// Issue 54: each pass end stopped every tenant of a lane at once (its
// waiting pushes withdrawn, then the next pass's look-up, read and record
// before any request, each waiting for the pool): in the own-limits row
// of syncer-lab bench a busy lane sent nothing for 350-520 ms every 2 s
// under load, and its tenants at 10/s fell to 0.87x. A lane's pass whose
// end nothing waits for now goes on past PassLength (lanePassLongest):
// two tenants at 2/s draining 7 s of backlog have no pass end, so no
// batch of theirs is withdrawn.
func TestLanePassGoesOnWhileNothingWaitsForItsEnd(t *testing.T) {
	const backlog = 7 // seconds at 2/s: three pass ends at PassLength
	b := tenantSetup(t, 1, nil)
	b.batch = 10
	b.exec(t, `INSERT INTO contacts SELECT i, CASE WHEN i % 2 = 0 THEN 'w0' ELSE 'w1' END, 'x'
		FROM generate_series(1, $1::int) i`, 2*2*backlog*10)
	dests := &tenantDests{url: b.url, rateLimit: 2}
	b.daemon(t, dests, 0, 1)
	require.Eventually(t, func() bool { return b.pending(t, "w0")+b.pending(t, "w1") == 0 }, time.Minute, 100*time.Millisecond)

	st := b.fake.TenantStats().Total
	require.EqualValues(t, 2*2*backlog*10, st.DistinctPairs, "every row reached its account")
	require.Zero(t, st.DuplicatePairs, "none twice")
	require.EqualValues(t, st.Requests, dests.pushes.Load(),
		"no batch withdrawn: the pass did not end while both tenants had rows (%d batches handed over, %d requests)", dests.pushes.Load(), st.Requests)
}

// A pass that goes on never holds a tenant with little to send: once a
// tenant is read to its end, a change to a key behind its cursor is read
// by the next pass only, so the pass ends at its time, as every pass did
// (lanepass.go). w2's row, sent at once and updated while w0 and w1 drain
// 7 s of backlog, arrives again within a pass, not at their drain's end.
func TestLanePassEndsAtItsTimeOnceATenantIsReadToItsEnd(t *testing.T) {
	const backlog = 7 // seconds at 2/s
	b := tenantSetup(t, 1, nil)
	b.batch = 10
	b.exec(t, `INSERT INTO contacts SELECT i, CASE WHEN i % 2 = 0 THEN 'w0' ELSE 'w1' END, 'x'
		FROM generate_series(1, $1::int) i`, 2*2*backlog*10)
	b.exec(t, `INSERT INTO contacts VALUES (0, 'w2', 'x')`)
	dests := &tenantDests{url: b.url, rateLimit: 2, rates: map[string]float64{"w2": 50}}
	b.daemon(t, dests, 0, 1)
	require.Eventually(t, func() bool { return len(b.fake.TenantDeliveries("w2")) == 1 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	b.exec(t, `UPDATE contacts SET name = 'y' WHERE id = 0`)
	updated := time.Now()
	require.Eventually(t, func() bool { return len(b.fake.TenantDeliveries("w2")) == 2 }, time.Minute, 20*time.Millisecond)
	took := time.Since(updated)
	require.Less(t, took, 3500*time.Millisecond, "w2's change behind its cursor waited for the next pass, at its time")
	require.Positive(t, b.pending(t, "w0")+b.pending(t, "w1"), "w0 and w1 still have a backlog")
}
