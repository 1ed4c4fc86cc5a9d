package history_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

func item(id string, v int64) feed.Item { return feed.Item{ID: id, Version: v} }

// A batch's entries: one per item per request that carried it, the last
// request of each item with its settlement (a split's halves, a retry
// after a 503), and the items settled without a request; a version a
// newer one followed unsettled reads as superseded.
func TestBatchEntriesAndLookup(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	at := time.Now().UTC().Truncate(time.Millisecond)
	a1, a2, b2, c3 := item("a", 1), item("a", 2), item("b", 2), item("c", 3)
	qb := &pgx.Batch{}
	history.Queue(qb, &history.Batch{
		Feed: "orders", Destination: "crm", BatchedAt: at,
		Attempts: []delivery.Attempt{
			{Key: "k-whole", At: at, Latency: 12 * time.Millisecond, Status: 503, Reason: "503 busy", Items: []feed.Item{a1, b2}},
			{Key: "k-whole", At: at.Add(time.Second), Latency: 8 * time.Millisecond, Status: 400, Reason: "400 bad", Items: []feed.Item{a1, b2}},
			{Key: "k-a", At: at.Add(2 * time.Second), Status: 200, Items: []feed.Item{a1}},
			{Key: "k-b", At: at.Add(2 * time.Second), Status: 400, Reason: "400 bad", Items: []feed.Item{b2}},
		},
		Accepted: []feed.Item{a1},
		Rejected: []delivery.Rejection{{Item: b2, Error: "refused as a whole: 400 " + strings.Repeat("x", 900)}},
		Skipped:  []feed.Item{c3},
	})
	require.NoError(t, pool.SendBatch(ctx, qb).Close())
	require.NoError(t, history.Write(ctx, pool, &history.Batch{Feed: "orders", Destination: "crm", BatchedAt: at,
		Attempts: []delivery.Attempt{{Key: "k-2", At: at.Add(3 * time.Second), Status: 429, Reason: "429 slow down", Items: []feed.Item{a2}}}}))

	st, err := history.Lookup(ctx, pool, "orders", "a", 0)
	require.NoError(t, err)
	require.Len(t, st.Versions, 2)
	v1 := st.Versions[0]
	require.Equal(t, history.Accepted, v1.Settled)
	var got []string
	for _, e := range v1.Entries {
		got = append(got, e.Outcome+" "+e.BatchKey)
	}
	require.Equal(t, []string{"retried k-whole", "split k-whole", "accepted k-a"}, got)
	require.Equal(t, 503, *v1.Entries[0].Status)
	require.Equal(t, 12, *v1.Entries[0].LatencyMS)
	require.Equal(t, "503 busy", v1.Entries[0].Reason)
	require.Equal(t, "crm", v1.Entries[2].Destination)
	require.True(t, v1.Entries[2].BatchedAt.Equal(at))
	require.Equal(t, history.Pending, st.Versions[1].Settled, "the newest, only rate-limited so far")
	require.Equal(t, history.RateLimited, st.Versions[1].Entries[0].Outcome)

	st, err = history.Lookup(ctx, pool, "orders", "b", 0)
	require.NoError(t, err)
	require.Equal(t, history.Failed, st.Versions[0].Settled)
	last := st.Versions[0].Entries[len(st.Versions[0].Entries)-1]
	require.Len(t, last.Reason, history.ReasonMax, "a reason is cut to its bound")

	st, err = history.Lookup(ctx, pool, "orders", "c", 0)
	require.NoError(t, err)
	require.Equal(t, history.Skipped, st.Versions[0].Settled)
	require.Nil(t, st.Versions[0].Entries[0].Status, "no request")

	// A newer version settles; the older, never settled, is superseded.
	qb = &pgx.Batch{}
	history.Queue(qb, &history.Batch{Feed: "orders", Attempts: []delivery.Attempt{{Key: "k-3", At: at.Add(4 * time.Second), Status: 200, Items: []feed.Item{item("a", 3)}}},
		Accepted: []feed.Item{item("a", 3)}})
	require.NoError(t, pool.SendBatch(ctx, qb).Close())
	st, err = history.Lookup(ctx, pool, "orders", "a", 0)
	require.NoError(t, err)
	require.Equal(t, []string{history.Accepted, history.Superseded, history.Accepted},
		[]string{st.Versions[0].Settled, st.Versions[1].Settled, st.Versions[2].Settled})

	st, err = history.Lookup(ctx, pool, "orders", "a", 2)
	require.NoError(t, err)
	require.True(t, st.Truncated)
	st, err = history.Lookup(ctx, pool, "customers", "a", 0)
	require.NoError(t, err)
	require.Empty(t, st.Versions, "another feed's key is another story")
}

// Pruning under load: entries past the retention go, in chunks, while
// writers keep adding new ones; then the size bound removes the oldest
// whatever their age, and the newest are kept.
func TestPruneUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	now := time.Now()
	// 20 000 old entries, seeded in SQL.
	_, err := pool.Exec(ctx, `INSERT INTO syncer_history (feed, key, version, at, outcome)
		SELECT 'orders', (g % 1000)::text, g, $1::timestamptz + g * interval '1 millisecond', 'accepted'
		FROM generate_series(1, 20000) g`, now.Add(-10*24*time.Hour))
	require.NoError(t, err)
	// and 5 000 in 50 old requests.
	_, err = pool.Exec(ctx, `INSERT INTO syncer_history_requests (feed, at, batch_key, status, latency_ms, keys, versions, items)
		SELECT 'orders', $1::timestamptz + r * interval '1 second', 'k-' || r, 200, 5,
			array_agg(((r * 100 + g) % 1000)::text), array_agg(r * 100 + g), 100
		FROM generate_series(1, 50) r, generate_series(1, 100) g GROUP BY r`, now.Add(-9*24*time.Hour))
	require.NoError(t, err)

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var written int
	wg.Go(func() {
		for i := 0; wctx.Err() == nil && i < 200; i++ {
			its := make([]feed.Item, 50)
			for j := range its {
				its[j] = item("new", int64(i*50+j))
			}
			if err := history.Write(ctx, pool, &history.Batch{Feed: "orders",
				Attempts: []delivery.Attempt{{Key: "k", At: time.Now(), Status: 200, Items: its}}, Accepted: its}); err != nil {
				t.Error(err)
				return
			}
			written += len(its)
		}
	})
	p, err := history.NewPruner(pool, &history.Config{Chunk: 1000, Pause: time.Millisecond, MaxEntries: 1_000_000})
	require.NoError(t, err)
	n, err := p.Prune(ctx)
	require.NoError(t, err)
	stop()
	wg.Wait()
	require.EqualValues(t, 20000+5000, n, "every old entry, and only those")
	require.Equal(t, written, entriesLeft(t, pool))

	// The size bound: the oldest go first, whatever their age.
	_, err = pool.Exec(ctx, `ANALYZE syncer_history; ANALYZE syncer_history_requests`)
	require.NoError(t, err)
	// The bound is held against PostgreSQL's estimates of both tables,
	// which the statistics follow late: the exact count asserted below
	// needs both exact first (CI once pruned 3,600 for 2,850: the
	// entries' estimate still counted 750 of the rows pruned above).
	var live, entries int64
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT
			(SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'syncer_history_requests'::regclass),
			(SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'syncer_history'::regclass)`).Scan(&live, &entries)
		if err == nil && (live != int64(written/50) || entries != 0) {
			_, err = pool.Exec(ctx, `ANALYZE syncer_history; ANALYZE syncer_history_requests`)
			return false
		}
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	p, err = history.NewPruner(pool, &history.Config{Chunk: 300, Pause: time.Millisecond, MaxEntries: 1000})
	require.NoError(t, err)
	n, err = p.Prune(ctx)
	require.NoError(t, err)
	require.EqualValues(t, written-1000, n, "as many as the bound is exceeded by")
	var oldest int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(v) FROM syncer_history_requests, unnest(versions) v`).Scan(&oldest))
	require.EqualValues(t, written-1000, oldest, "the newest 1000 are kept")
	require.Equal(t, 1000, entriesLeft(t, pool))
}

// entriesLeft counts the entries of both tables.
func entriesLeft(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM syncer_history)
		+ (SELECT coalesce(sum(items), 0) FROM syncer_history_requests)`).Scan(&n))
	return n
}

// A version's capture time is read back from either table: the common
// batch's request and an entry of its own.
func TestCapturedTime(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	at := time.Now().UTC().Truncate(time.Millisecond)
	x, y := item("x", 1), item("y", 1)
	x.SetCaptured(at.Add(-time.Minute))
	qb := &pgx.Batch{}
	history.Queue(qb, &history.Batch{Feed: "orders", Destination: "crm", BatchedAt: at,
		Attempts: []delivery.Attempt{{Key: "k-1", At: at, Status: 200, Items: []feed.Item{x, y}}}, Accepted: []feed.Item{x, y}})
	z := item("x", 2)
	z.SetCaptured(at.Add(-time.Second))
	history.Queue(qb, &history.Batch{Feed: "orders", Destination: "crm", BatchedAt: at,
		Attempts: []delivery.Attempt{{Key: "k-2", At: at.Add(time.Second), Status: 422, Items: []feed.Item{z}}},
		Rejected: []delivery.Rejection{{Item: z, Error: "422 no"}}})
	require.NoError(t, pool.SendBatch(ctx, qb).Close())

	st, err := history.Lookup(ctx, pool, "orders", "x", 0)
	require.NoError(t, err)
	require.Len(t, st.Versions, 2)
	require.True(t, st.Versions[0].Captured.Equal(x.Captured()), "from the request's row")
	require.Equal(t, history.Accepted, st.Versions[0].Settled)
	require.Equal(t, "k-1", st.Versions[0].Entries[0].BatchKey)
	require.True(t, st.Versions[1].Captured.Equal(z.Captured()), "from an entry of its own")
	require.Equal(t, history.Failed, st.Versions[1].Settled)
	st, err = history.Lookup(ctx, pool, "orders", "y", 0)
	require.NoError(t, err)
	require.Len(t, st.Versions, 1)
	require.Nil(t, st.Versions[0].Captured, "a read that did not say")
}

// The Pruner indexes the requests' keys once no request came for
// TidyQuiet; lookups find keys before and after.
func TestTidyWhenQuiet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	for i := range 20 {
		its := make([]feed.Item, 100)
		for j := range its {
			its[j] = item(fmt.Sprint(i*100+j), 1)
		}
		require.NoError(t, history.Write(ctx, pool, &history.Batch{Feed: "orders",
			Attempts: []delivery.Attempt{{Key: fmt.Sprint("k-", i), At: time.Now(), Status: 200, Items: its}}, Accepted: its}))
	}
	st, err := history.Lookup(ctx, pool, "orders", "1234", 0)
	require.NoError(t, err)
	require.Len(t, st.Versions, 1, "found among the requests not indexed yet")

	var logs dbtest.Buffer
	p, err := history.NewPruner(pool, &history.Config{Every: time.Hour, TidyQuiet: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(rctx) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "tidied") }, 20*time.Second, 50*time.Millisecond)
	stop()
	<-done
	marked, err := p.Tidy(ctx)
	require.NoError(t, err)
	require.Zero(t, marked, "nothing left to index")
	st, err = history.Lookup(ctx, pool, "orders", "1234", 0)
	require.NoError(t, err)
	require.Len(t, st.Versions, 1, "found in the tree")
}
