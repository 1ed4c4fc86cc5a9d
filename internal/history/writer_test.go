package history_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

// gated holds every write until its gate opens.
type gated struct {
	database.Querier
	gate chan struct{}
}

func (g *gated) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return pgconn.CommandTag{}, ctx.Err()
	}
	return g.Querier.Exec(ctx, sql, args...)
}

// Batches handed from many goroutines, accepted ones and others mixed in
// the writer's statements, are all written, each entry once, the last of
// them by Close. While the writes are held, the queue fills to its bound
// and Add waits: an Add whose context ends first writes nothing.
func TestWriterConcurrentBatches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	q := &gated{Querier: pool, gate: make(chan struct{})}
	w, err := history.NewWriter(q, &history.WriterConfig{MaxQueued: 64, FlushEntries: 32, FlushInterval: 20 * time.Millisecond})
	require.NoError(t, err)

	// The first batches fill the queue while the write is held; one more
	// waits for room until its context ends.
	full := func(i int) *history.Batch {
		its := []feed.Item{item(fmt.Sprintf("held-%d", i), 1)}
		return &history.Batch{Feed: "orders", Destination: "crm",
			Attempts: []delivery.Attempt{{Key: "k-held", At: time.Now(), Status: 200, Items: its}}, Accepted: its}
	}
	held := 0
	for ; held < 64*2+1; held++ {
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := w.Add(actx, full(held))
		cancel()
		if err != nil {
			break
		}
	}
	require.Less(t, held, 64*2+1, "Add waits once the queue and the write in flight hold their bound")
	close(q.gate)

	const goroutines, batches, items = 8, 40, 7
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for b := range batches {
				its := make([]feed.Item, items)
				for i := range its {
					its[i] = item(fmt.Sprintf("g%d-b%d-i%d", g, b, i), int64(b+1))
				}
				hb := &history.Batch{Feed: "orders", Destination: "crm", BatchedAt: time.Now(),
					Attempts: []delivery.Attempt{{Key: fmt.Sprintf("k-%d-%d", g, b), At: time.Now(), Latency: time.Millisecond, Status: 200, Items: its}},
					Accepted: its}
				if b%5 == 0 {
					// Not the common batch: one item rejected, one skipped
					// without a request.
					hb.Accepted = its[:items-2]
					hb.Rejected = []delivery.Rejection{{Item: its[items-2], Error: "422 bad"}}
					hb.Attempts[0].Items = its[:items-1]
					hb.Skipped = its[items-1:]
				}
				if err := w.Add(ctx, hb); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close(ctx))

	var total, distinct, failed, skipped int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (key, version)),
		count(*) FILTER (WHERE outcome = 'failed' AND reason = '422 bad'),
		count(*) FILTER (WHERE outcome = 'skipped' AND status IS NULL AND batch_key IS NULL)
		FROM syncer_history WHERE key LIKE 'g%'`).Scan(&total, &distinct, &failed, &skipped))
	require.Equal(t, goroutines*batches*items, total, "every entry")
	require.Equal(t, total, distinct, "each once")
	require.Equal(t, goroutines*batches/5, failed)
	require.Equal(t, goroutines*batches/5, skipped)
	var heldWritten int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM syncer_history WHERE key LIKE 'held-%'`).Scan(&heldWritten))
	require.Equal(t, held, heldWritten, "what Add took is written; the Add that gave up, not")

	// After Close, Add writes at once.
	require.NoError(t, w.Add(ctx, full(1000)))
	st, err := history.Lookup(ctx, pool, "orders", "held-1000", 0)
	require.NoError(t, err)
	require.Len(t, st.Versions, 1)
	require.Equal(t, history.Accepted, st.Versions[0].Settled)
}

// failing fails its first write, and then closes failed.
type failing struct {
	database.Querier
	once   sync.Once
	failed chan struct{}
}

func (f *failing) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	first := false
	f.once.Do(func() { first = true })
	if first {
		defer close(f.failed)
		return pgconn.CommandTag{}, errors.New("connection refused")
	}
	return f.Querier.Exec(ctx, sql, args...)
}

// A write that fails loses its entries to the story, and the writer goes
// on with the next.
func TestWriterFailureGoesOn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	q := &failing{Querier: pool, failed: make(chan struct{})}
	w, err := history.NewWriter(q, &history.WriterConfig{FlushEntries: 1})
	require.NoError(t, err)
	batch := func(v int64) *history.Batch {
		its := []feed.Item{item("a", v)}
		return &history.Batch{Feed: "orders", Attempts: []delivery.Attempt{{Key: fmt.Sprint("k", v), At: time.Now(), Status: 200, Items: its}}, Accepted: its}
	}
	require.NoError(t, w.Add(ctx, batch(1)))
	select {
	case <-q.failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the first write never came")
	}
	require.NoError(t, w.Add(ctx, batch(2)))
	require.NoError(t, w.Close(ctx))
	st, err := history.Lookup(ctx, pool, "orders", "a", 0)
	require.NoError(t, err)
	require.Len(t, st.Versions, 1, "the failed write's entry is lost; the next one is written")
	require.EqualValues(t, 2, st.Versions[0].Version)
}
