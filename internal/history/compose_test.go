package history_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

// TestComposedRequestIsTheQueuedOne: the common batch's row written by a
// composed statement, its keys and versions another piece's arguments,
// is the row Queue writes; a batch that is not the common one composes
// nothing.
func TestComposedRequestIsTheQueuedOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	at := time.Now().UTC().Truncate(time.Millisecond)
	// Every item captured ([]time.Time), all but one (a NULL among
	// them), none (a NULL array).
	for _, captured := range []string{"all", "all but one", "none"} {
		items := make([]feed.Item, 50)
		ids, versions := make([]int64, 50), make([]int64, 50)
		for i := range items {
			items[i] = item(strconv.Itoa(i+1), int64(i+10))
			if captured == "all" || captured == "all but one" && i != 3 {
				items[i].SetCaptured(at.Add(-time.Duration(i) * time.Second))
			}
			ids[i], versions[i] = int64(i+1), int64(i+10)
		}
		batch := func(name string) *history.Batch {
			return &history.Batch{Feed: name, Destination: "crm", BatchedAt: at, Accepted: items,
				Attempts: []delivery.Attempt{{Key: "k-1", At: at, Status: 200, Latency: 12 * time.Millisecond, Items: items}}}
		}
		b := &pgx.Batch{}
		history.Queue(b, batch("queued"))
		var s compose.Statement
		idsArg := s.Arg(ids)
		require.True(t, batch("composed").ComposeRequest(&s, `(`+idsArg+`::bigint[])::text[]`, s.Arg(versions)+`::bigint[]`))
		s.Queue(b, "history")
		require.NoError(t, pool.SendBatch(ctx, b).Close())
		var same bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT (at, batched_at, batch_key, destination, tenant, status, latency_ms, keys, versions, deleted, captured, items)::text
				FROM syncer_history_requests WHERE feed = 'queued') =
			(SELECT (at, batched_at, batch_key, destination, tenant, status, latency_ms, keys, versions, deleted, captured, items)::text
				FROM syncer_history_requests WHERE feed = 'composed')`).Scan(&same))
		require.True(t, same, "captured %v", captured)
		_, err := pool.Exec(ctx, `DELETE FROM syncer_history_requests`)
		require.NoError(t, err)
	}
	split := &history.Batch{Feed: "x", Accepted: []feed.Item{item("1", 1)},
		Attempts: []delivery.Attempt{{Key: "k", Status: 503}, {Key: "k", Status: 200, Items: []feed.Item{item("1", 1)}}}}
	var s compose.Statement
	require.False(t, split.ComposeRequest(&s, "$1", "$2"))
	require.Zero(t, s.Len())
}

// TestSmallRequestIndexedAtOnce: a request of a few keys (a hot look's)
// is written indexed, queued or composed, so the Pruner's tidy has no row
// of it to write again; a drain's request of hundreds is left to the
// tidy. Lookups find the keys of both.
func TestSmallRequestIndexedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	at := time.Now().UTC()
	batch := func(name string, n int) *history.Batch {
		items := make([]feed.Item, n)
		for i := range items {
			items[i] = item(name+"-"+strconv.Itoa(i), 1)
		}
		return &history.Batch{Feed: "orders", Destination: "crm", Accepted: items,
			Attempts: []delivery.Attempt{{Key: "k-" + name, At: at, Status: 200, Items: items}}}
	}
	b := &pgx.Batch{}
	history.Queue(b, batch("small", 3))
	history.Queue(b, batch("large", 200))
	var s compose.Statement
	keys := []string{"composed-0", "composed-1"}
	require.True(t, batch("composed", 2).ComposeRequest(&s, s.Arg(keys)+`::text[]`, s.Arg([]int64{1, 1})+`::bigint[]`))
	s.Queue(b, "history")
	require.NoError(t, pool.SendBatch(ctx, b).Close())

	indexed := map[string]bool{}
	rows, err := pool.Query(ctx, `SELECT batch_key, indexed FROM syncer_history_requests`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		var ix bool
		require.NoError(t, rows.Scan(&k, &ix))
		indexed[k] = ix
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]bool{"k-small": true, "k-composed": true, "k-large": false}, indexed)
	for _, key := range []string{"small-2", "composed-1", "large-150"} {
		st, err := history.Lookup(ctx, pool, "orders", key, 0)
		require.NoError(t, err)
		require.Len(t, st.Versions, 1, key)
	}
}
