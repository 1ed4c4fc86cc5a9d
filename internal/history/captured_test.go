package history

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
)

// TestCapturedTimesEncodeWithoutAnAllocationApiece: the captured column of
// a drain's batch (500 rows) encodes in a few allocations, where a
// []time.Time took two an element (1,003, 24 KB: a twentieth of what a
// drained row allocated, issue 55), and reads back as the items' times,
// NULL for an item captured at no known time.
func TestCapturedTimesEncodeWithoutAnAllocationApiece(t *testing.T) {
	base := time.Date(2026, 11, 30, 4, 0, 0, 123456000, time.UTC)
	items := make([]feed.Item, 500)
	for i := range items {
		items[i] = feed.Item{ID: "k", Version: int64(i + 1)}
		if i != 7 {
			items[i].SetCaptured(base.Add(time.Duration(i) * time.Millisecond))
		}
	}
	b := &Batch{Attempts: []delivery.Attempt{{Status: 200}}, Accepted: items}
	var arrays Arrays
	_, captured := b.acceptedColumns(&arrays)
	m := pgtype.NewMap()
	var buf []byte
	allocs := testing.AllocsPerRun(20, func() {
		var err error
		buf, err = m.Encode(pgtype.TimestamptzArrayOID, pgtype.BinaryFormatCode, captured, buf[:0])
		require.NoError(t, err)
	})
	require.LessOrEqual(t, allocs, 10.0, "allocations to encode 500 captured times")

	var back []pgtype.Timestamptz
	require.NoError(t, m.Scan(pgtype.TimestamptzArrayOID, pgtype.BinaryFormatCode, buf, &back))
	require.Len(t, back, len(items))
	for i, it := range items {
		if i == 7 {
			require.False(t, back[i].Valid, "item %d", i)
			continue
		}
		require.True(t, back[i].Valid, "item %d", i)
		require.True(t, it.Captured().Equal(back[i].Time), "item %d: %v against %v", i, back[i].Time, it.Captured())
	}

	// Arrays reset for the next transaction hand the same arrays again.
	arrays.Reset()
	_, again := b.acceptedColumns(&arrays)
	require.Same(t, &captured.([]*capturedAt)[0], &again.([]*capturedAt)[0])
	none := &Batch{Attempts: b.Attempts, Accepted: []feed.Item{{ID: "n", Version: 1}}}
	_, c := none.acceptedColumns(&arrays)
	require.Nil(t, c, "none captured: a NULL array")
}
