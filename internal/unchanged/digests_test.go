package unchanged_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// TestDigestsAreTheDigestsKept: the digests a marker adds in one array
// are each what Digest gives (the digests kept before this change are
// still found equal), none overwritten by the next, and a Digester reused
// gives the same as a fresh one.
func TestDigestsAreTheDigestsKept(t *testing.T) {
	t.Parallel()
	// Digest as it was first written, with a hash and a sum apiece.
	first := func(tag string, it feed.Item) []byte {
		h := sha256.New()
		fmt.Fprintf(h, "%d:%s", len(tag), tag)
		if it.Deleted {
			h.Write([]byte{'D'})
		} else {
			h.Write([]byte{'P'})
			h.Write(it.Payload)
		}
		return h.Sum(nil)[:16]
	}
	items := make([]feed.Item, 600)
	for i := range items {
		items[i] = feed.Item{ID: strconv.Itoa(i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Deleted: i%7 == 0}
	}
	ds := unchanged.NewDigests(500) // fewer than added: the array grows
	var dg unchanged.Digester
	var sum []byte
	for _, it := range items {
		ds.Add("https://example.com|syncer", it)
		sum = dg.Append(sum[:0], "https://example.com|syncer", it)
		require.Equal(t, first("https://example.com|syncer", it), sum)
	}
	require.Equal(t, len(items), ds.Len())
	for i, it := range items {
		require.Equal(t, it.ID, ds.Keys[i])
		require.Equal(t, first("https://example.com|syncer", it), ds.Sums[i], "item %d", i)
		require.Equal(t, unchanged.Digest("https://example.com|syncer", it), ds.Sums[i])
	}
	var none *unchanged.Digests
	require.Zero(t, none.Len())
}

// TestDigestsAllocateLittle: a batch's digests cost a few allocations
// whatever its size, where a hash and a sum apiece were a tenth of what a
// drain allocated.
func TestDigestsAllocateLittle(t *testing.T) {
	items := make([]feed.Item, 500)
	for i := range items {
		items[i] = feed.Item{ID: strconv.Itoa(i), Payload: json.RawMessage(`{"a":1}`)}
	}
	allocs := testing.AllocsPerRun(20, func() {
		ds := unchanged.NewDigests(len(items))
		for _, it := range items {
			ds.Add("tag", it)
		}
	})
	require.LessOrEqual(t, allocs, 10.0)
}

// TestDigestsResetAreReusedWhole: Digests reset for a batch no larger
// than they held allocate nothing (issue 55: the marker reuses a
// transaction's in the next), and hold exactly the new batch's digests,
// none of the last one's; reset for a larger batch they grow.
func TestDigestsResetAreReusedWhole(t *testing.T) {
	batch := func(from, n int) []feed.Item {
		items := make([]feed.Item, n)
		for i := range items {
			items[i] = feed.Item{ID: strconv.Itoa(from + i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, from+i))}
		}
		return items
	}
	ds := unchanged.NewDigests(500)
	for _, it := range batch(0, 500) {
		ds.Add("tag", it)
	}
	next := batch(1000, 300)
	allocs := testing.AllocsPerRun(20, func() {
		ds.Reset(len(next))
		for _, it := range next {
			ds.Add("tag", it)
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, len(next), ds.Len())
	for i, it := range next {
		require.Equal(t, it.ID, ds.Keys[i])
		require.Equal(t, unchanged.Digest("tag", it), ds.Sums[i], "item %d", i)
	}
	larger := batch(5000, 800)
	ds.Reset(len(larger))
	for _, it := range larger {
		ds.Add("tag", it)
	}
	require.Equal(t, len(larger), ds.Len())
	for i, it := range larger {
		require.Equal(t, it.ID, ds.Keys[i])
		require.Equal(t, unchanged.Digest("tag", it), ds.Sums[i], "item %d", i)
	}
}
