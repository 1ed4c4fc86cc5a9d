package history_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

// commonBatch is a request of n items from key prefix, all accepted.
func commonBatch(prefix string, n int, at time.Time) *history.Batch {
	items := make([]feed.Item, n)
	for i := range items {
		items[i] = item(fmt.Sprintf("%s%d", prefix, i), int64(i+1))
	}
	return &history.Batch{Feed: "orders", Destination: "crm", BatchedAt: at,
		Attempts: []delivery.Attempt{{Key: "k-" + prefix, At: at, Status: 200, Items: items}},
		Accepted: items}
}

// Arrays reset for the next transaction while the last one is still in
// flight leave its entries whole: its arguments were encoded when it was
// sent (issue 55: the marker reuses them).
func TestArraysReusedLeaveTheLastTransactionWhole(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	at := time.Now().UTC().Truncate(time.Millisecond)
	var arrays history.Arrays
	var open []pgx.BatchResults
	for _, tx := range []struct {
		prefix string
		n      int
	}{{"a", 3}, {"b", 5}, {"c", 2}} {
		arrays.Reset()
		qb := &pgx.Batch{}
		history.QueueIn(qb, commonBatch(tx.prefix, tx.n, at), &arrays)
		history.QueueIn(qb, commonBatch(tx.prefix+"x", 1, at), &arrays)
		open = append(open, pool.SendBatch(ctx, qb)) // left unread
	}
	for _, br := range open {
		require.NoError(t, br.Close())
	}
	for key, version := range map[string]int64{"a0": 1, "a2": 3, "b4": 5, "bx0": 1, "c1": 2, "cx0": 1} {
		st, err := history.Lookup(ctx, pool, "orders", key, 0)
		require.NoError(t, err)
		require.Len(t, st.Versions, 1, key)
		require.Equal(t, version, st.Versions[0].Version, key)
		require.Equal(t, history.Accepted, st.Versions[0].Settled, key)
	}
}

// Arrays kept across transactions allocate no key or version array once
// they fit: those were about 24 bytes of every row a drain marked. Not
// parallel: the count is the process's.
func TestArraysReusedAllocateNoArrays(t *testing.T) {
	b := commonBatch("k", 500, time.Now())
	var arrays history.Arrays
	history.QueueIn(&pgx.Batch{}, b, &arrays)
	const calls = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		arrays.Reset()
		history.QueueIn(&pgx.Batch{}, b, &arrays)
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	require.Less(t, perCall, uint64(500*8), "bytes allocated per common batch of 500 items, arrays kept (new arrays: 500*24)")
}
