package checkpoint_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
)

// jsonBody is a batch-like body of about n bytes, different for each tag.
func jsonBody(tag string, n int) []byte {
	item := fmt.Sprintf(`{"id":"%s","payload":{"name":"resource %s","size":12345}},`, tag, tag)
	return []byte(`{"items":[` + strings.Repeat(item, max(1, n/len(item))) + `]}`)
}

// A Packer's buffers are reused by its next record: what it queued must
// have been encoded by then (SendBatch encodes before it returns), and a
// record queued while the one before it is still in flight leaves that
// one's bodies whole, whether its buffers grow (larger bodies) or not.
func TestPackerRecordsInFlightStayWhole(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	var pk checkpoint.Packer
	sizes := [][]int{{200, 3000}, {64 << 10, 100, 200 << 10}, {500}, {1 << 10, 1 << 10}}
	var want []checkpoint.Batch
	var open []pgx.BatchResults
	seqs := make([][]int64, len(sizes))
	for i, ns := range sizes {
		var bs []checkpoint.Batch
		for j, n := range ns {
			key := fmt.Sprintf("k%d.%d", i, j)
			bs = append(bs, checkpoint.Batch{Key: key, Salt: "s" + key, Items: j + 1, Body: jsonBody(key, n)})
		}
		want = append(want, bs...)
		b := &pgx.Batch{}
		pk.QueueRecord(b, checkpoint.Live, int64(10*(i+1)), bs, &seqs[i], checkpoint.Progress{})
		// Left unread while the next record reuses the Packer.
		open = append(open, pool.SendBatch(ctx, b))
	}
	for i, br := range open {
		require.NoError(t, br.Close())
		require.Len(t, seqs[i], len(sizes[i]))
	}
	recs, err := checkpoint.Recorded(ctx, pool)
	require.NoError(t, err)
	require.Len(t, recs, len(want))
	byKey := map[string]checkpoint.Batch{}
	for _, r := range recs {
		byKey[r.Key] = r
	}
	for _, w := range want {
		got, ok := byKey[w.Key]
		require.True(t, ok, w.Key)
		require.Equal(t, w.Salt, got.Salt)
		require.Equal(t, w.Items, got.Items)
		require.Equal(t, w.Body, got.Body, "%s byte for byte", w.Key)
	}
}

// The marker records a transaction's batches every few milliseconds of a
// drain: a Packer kept across them allocates no scratch or copy of the
// bodies once its buffers fit (issue 55: QueueRecord allocated a bit more
// than each body, about 45 MB over a drain of 100,000 rows). Not parallel:
// the count is the process's.
func TestPackerReusedAllocatesNoBodies(t *testing.T) {
	bs := []checkpoint.Batch{
		{Key: "a", Salt: "a", Items: 500, Body: jsonBody("a", 128<<10)},
		{Key: "b", Salt: "b", Items: 500, Body: jsonBody("b", 128<<10)},
	}
	var pk checkpoint.Packer
	var seqs []int64
	pk.QueueRecord(&pgx.Batch{}, checkpoint.Live, 1, bs, &seqs, checkpoint.Progress{}) // sizes its buffers
	const calls = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		pk.QueueRecord(&pgx.Batch{}, checkpoint.Live, 1, bs, &seqs, checkpoint.Progress{})
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	// Less than one body: without a kept Packer, each record allocated
	// s2's worst case for a body (a bit more than the body) and the packed
	// copies. (Without -race it is a few hundred bytes; with it, s2's
	// pooled hash table is sometimes dropped and made anew.)
	require.Less(t, perCall, uint64(len(bs[0].Body)),
		"bytes allocated per record of two 128 KiB bodies with a Packer kept")
}
