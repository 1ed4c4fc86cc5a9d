package unchanged_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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

// TestDigestsUnderEveryTagLengthAreTheFirstOnes: a Digester that
// restores the hash's state after a tag of a block or more (a
// destination's tag, 64 hex digits) gives the digests first written,
// which rows and tables keep (resources.accepted_digest): tags of every
// length around the block's 64 bytes, switched on one Digester.
func TestDigestsUnderEveryTagLengthAreTheFirstOnes(t *testing.T) {
	t.Parallel()
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
	long := strings.Repeat("0123456789abcdef", 12)
	var dg unchanged.Digester
	var sum []byte
	for _, n := range []int{0, 1, 59, 60, 61, 62, 63, 64, 65, 66, 124, 125, 126, 128, 150, 192} {
		tag := long[:n]
		for i := range 4 {
			it := feed.Item{ID: strconv.Itoa(i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"s":%q}`, i, long[:i*40])), Deleted: i == 2}
			sum = dg.Append(sum[:0], tag, it)
			require.Equal(t, first(tag, it), sum, "tag of %d bytes, item %d", n, i)
			require.Equal(t, first(tag, it), unchanged.Digest(tag, it), "tag of %d bytes, item %d", n, i)
		}
	}
	// The bodyTag of a destination, as the daemon makes it, against
	// sha256sum of "64:<tag>P{\"id\": 7}".
	tag := strings.Repeat("ab", sha256.Size)
	it := feed.Item{ID: "7", Payload: json.RawMessage(`{"id": 7}`)}
	require.Equal(t, "1434ec3a026ce4e52ce610dbaf352494", fmt.Sprintf("%x", dg.Append(nil, tag, it)))
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

// BenchmarkDigester digests a drain's row: the bench's payload (some 290
// bytes) under a destination's tag (64 hex digits).
func BenchmarkDigester(b *testing.B) {
	tag := strings.Repeat("ab", sha256.Size)
	it := feed.Item{ID: "123456", Payload: json.RawMessage(`{"id": 123456, "data": "` + strings.Repeat("0123456789abcdef", 14) + `", "kind": "bench", "name": "resource-123456"}`)}
	var dg unchanged.Digester
	var sum []byte
	for b.Loop() {
		sum = dg.Append(sum[:0], tag, it)
	}
}
