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
func TestLanePassEndWithdrawsBatchesWaitingForTokens(t *testing.T) {
	const backlog = 7 // seconds at 2/s: three pass ends
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
	require.Greater(t, dests.pushes.Load(), st.Requests,
		"a batch waiting for its token at a pass end was withdrawn, not sent (%d batches handed over, %d requests)", dests.pushes.Load(), st.Requests)
}
