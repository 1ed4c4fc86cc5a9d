package unchanged_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// TestComposedDigestsAreTheQueuedOnes: the digests a composed statement
// keeps (one bytea split by the statement, keys shared with another
// piece) are the rows QueueSettledDigests writes, fresh ones inserted
// and kept ones overwritten, under their tenant.
func TestComposedDigestsAreTheQueuedOnes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	const tag = "https://example.com|syncer"
	items := func(gen int) []feed.Item {
		out := make([]feed.Item, 300)
		for i := range out {
			out[i] = feed.Item{ID: strconv.Itoa(i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"gen":%d}`, i, gen))}
		}
		return out
	}
	read := func(name, tenant string) map[string][]byte {
		rows, err := pool.Query(ctx, `SELECT key, digest FROM syncer_source_digests WHERE feed = $1 AND tenant = $2`, name, tenant)
		require.NoError(t, err)
		out := map[string][]byte{}
		var k string
		var d []byte
		_, err = pgx.ForEachRow(rows, []any{&k, &d}, func() error { out[k] = append([]byte(nil), d...); return nil })
		require.NoError(t, err)
		return out
	}
	write := func(composed bool, name, tenant string, its []feed.Item, fresh bool) {
		ds := unchanged.NewDigests(len(its))
		ids := make([]int64, len(its))
		for i, it := range its {
			ds.Add(tag, it)
			ids[i], _ = strconv.ParseInt(it.ID, 10, 64)
		}
		b := &pgx.Batch{}
		if composed {
			var s compose.Statement
			unchanged.ComposeSettled(&s, name, tenant, `(`+s.Arg(ids)+`::bigint[])::text[]`, ds, fresh)
			s.Queue(b, "digests")
		} else if fresh {
			unchanged.QueueSettledDigests(b, name, tenant, nil, ds, nil)
		} else {
			unchanged.QueueSettledDigests(b, name, tenant, ds, nil, nil)
		}
		require.NoError(t, pool.SendBatch(ctx, b).Close())
	}
	for _, tenant := range []string{"", "t1"} {
		write(false, "queued", tenant, items(1), true)
		write(true, "composed", tenant, items(1), true)
		require.Len(t, read("composed", tenant), 300)
		require.Equal(t, read("queued", tenant), read("composed", tenant))
		// Fresh again over kept ones (syncer_keep_source_digests' second
		// statement), then kept: the new bodies' digests win.
		write(false, "queued", tenant, items(2), true)
		write(true, "composed", tenant, items(2), true)
		require.Equal(t, read("queued", tenant), read("composed", tenant))
		write(false, "queued", tenant, items(3), false)
		write(true, "composed", tenant, items(3), false)
		got := read("composed", tenant)
		require.Equal(t, read("queued", tenant), got)
		require.Equal(t, unchanged.Digest(tag, items(3)[7]), got["7"])
	}
}
