package exporter

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

// readsCounted counts the statements that read pending items.
type readsCounted struct{ n atomic.Int64 }

func (r *readsCounted) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "k.version") {
		r.n.Add(1)
	}
	return ctx
}

func (r *readsCounted) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Issue 54: a lane's turn reads its tenants' pages in one statement, not
// one a tenant (each waited for one of the pool's connections: a turn of
// the bench's busiest lanes took 500-900 ms, and a tenant at 10/s ran dry
// between its turns); each tenant's pages are its own, in key order.
func TestLaneTurnReadsItsTenantsInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ts := dbtest.NewMigrated(t)
	_, err := ts.Pool.Exec(ctx, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, name text)`)
	require.NoError(t, err)
	specs := []sources.Spec{{Name: "contacts", Table: "contacts", Keys: []string{"id"}, Key: "id", Destination: "crm", Tenant: "account", Lanes: 1}}
	_, err = sources.Install(ctx, ts.Pool, specs)
	require.NoError(t, err)
	srcs, err := sources.Resolve(ctx, ts.Pool, specs)
	require.NoError(t, err)
	// 8 tenants, 3 rows each, their keys interleaved.
	_, err = ts.Pool.Exec(ctx, `INSERT INTO contacts SELECT i, 't' || (i % 8), 'n' || i FROM generate_series(1, 24) i`)
	require.NoError(t, err)

	cfg := ts.Pool.Config().Copy()
	reads := &readsCounted{}
	cfg.ConnConfig.Tracer = reads
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	lim := feed.Limits{Items: 1}.WithDefaults()
	f := &laneFeed{pool: pool, src: srcs[0], lane: 0, name: "syncer_source:contacts$lane0", lim: lim,
		tenants: oneDest{pacedDest{}}, now: time.Now, logger: slog.New(slog.DiscardHandler)}
	c := f.Open(feed.Start)
	got := map[string][]string{}
	turn := func() {
		t.Helper()
		before := reads.n.Load()
		seen := map[string]bool{}
		for range 8 {
			p, err := c.Next(ctx)
			require.NoError(t, err)
			require.Len(t, p.Items, 1)
			require.False(t, seen[p.Tenant], "one page a tenant a turn")
			seen[p.Tenant] = true
			got[p.Tenant] = append(got[p.Tenant], p.Items[0].ID)
		}
		require.Equal(t, int64(1), reads.n.Load()-before, "8 tenants' pages in one statement")
	}
	turn()
	turn()
	require.Len(t, got, 8)
	require.Equal(t, []string{"1", "9"}, got["t1"], "its keys in order")
	require.Equal(t, []string{"8", "16"}, got["t0"])
}
