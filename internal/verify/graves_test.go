package verify_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// Issue 54 point 15: resources deleted, their tombstones accepted and
// then purged after their retention, are graves the row's story still
// names: read back after the table's rows (all of them, across pages),
// one held there again is a zombie, and --heal buries it again with a new
// tombstone above the one accepted. One whose tombstone was rejected is
// failed; one inserted again is checked as a row, not as a grave.
func TestGravesOfResources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := setupLookups(t, verify.Range{}, `INSERT INTO resources (payload, synced_at) SELECT jsonb_build_object('n', g), now() FROM generate_series(1, 3) g`)
	// Ids 10..29 deleted at version 2, their tombstones accepted in one
	// request (29 rejected in a second), then purged; 12 inserted again.
	at := time.Now()
	var stones []feed.Item
	for id := 10; id < 29; id++ {
		stones = append(stones, feed.Item{ID: itoa(id), Version: 2, Deleted: true})
	}
	rejected := feed.Item{ID: "29", Version: 2, Deleted: true}
	qb := &pgx.Batch{}
	history.Queue(qb, &history.Batch{Feed: "resources", Destination: "default", BatchedAt: at,
		Attempts: []delivery.Attempt{{Key: "k1", At: at, Status: 200, Items: stones}}, Accepted: stones})
	history.Queue(qb, &history.Batch{Feed: "resources", Destination: "default", BatchedAt: at,
		Attempts: []delivery.Attempt{{Key: "k2", At: at, Status: 200, Items: []feed.Item{rejected}}},
		Rejected: []delivery.Rejection{{Item: rejected, Error: "no"}}})
	require.NoError(t, l.db.Pool.SendBatch(ctx, qb).Close())
	_, err := l.db.Pool.Exec(ctx, `INSERT INTO resources (id, payload, version, synced_at) VALUES (12, '{"n": 12}', 3, now())`)
	require.NoError(t, err)
	// The fake holds 1..3, 12, and 15 again (a zombie).
	fakeHolds(t, l, map[string]string{"1": `{"n": 1}`, "2": `{"n": 2}`, "3": `{"n": 3}`, "12": `{"n": 12}`, "15": `{"back": true}`})

	res, err := verify.Run(ctx, l.db.Pool, l.src, syncerReader(t, l.url), &verify.Config{LookupSize: 4})
	require.NoError(t, err)
	require.Equal(t, [5]int64{23, 21, 1, 1, 0}, [5]int64{res.Checked, res.OK, res.Zombie, res.Failed, res.Missing},
		"3 rows, 12 as a row, 18 graves (10..28 less 12 and 15 a zombie), 29 failed")

	res, err = verify.Run(ctx, l.db.Pool, l.src, syncerReader(t, l.url), &verify.Config{LookupSize: 4, Heal: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Healed)
	var version int64
	var pending bool
	require.NoError(t, l.db.Pool.QueryRow(ctx, `SELECT version, synced_at IS NULL FROM syncer_tombstones WHERE id = 15`).Scan(&version, &pending))
	require.Equal(t, [2]any{int64(3), true}, [2]any{version, pending}, "a new tombstone above the one accepted, pending")
}

func itoa(n int) string { return strconv.Itoa(n) }

// fakeHolds makes the fake hold these payloads, as a third party's own
// users would.
func fakeHolds(t *testing.T, l *lookups, held map[string]string) {
	t.Helper()
	d := fakethirdparty.Drift{Recreate: map[string]json.RawMessage{}}
	for id, p := range held {
		d.Recreate[id] = json.RawMessage(p)
	}
	l.fake.ApplyDrift(d)
}
