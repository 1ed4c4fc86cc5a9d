package exporter

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Every feed's items carry their capture time (feed.Item.Captured, for
// their story, issue 45), read with them: resources' rows and tombstones,
// live (with and without kept digests) and replayed, a source's keys, and
// a tenant's keys in its lane; each the start of the transaction that
// wrote the version.
func TestFeedsCarryTheCaptureTime(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{})
	ctx := t.Context()
	write := func(sql string) time.Time {
		t.Helper()
		var at time.Time
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT now()`).Scan(&at)
		}), sql)
		return at
	}
	first := func(f Feed) []feed.Item {
		t.Helper()
		p, err := f.Open(feed.Start).Next(ctx)
		require.NoError(t, err)
		return p.Items
	}
	same := func(want time.Time, it feed.Item) {
		t.Helper()
		require.False(t, it.Captured().IsZero(), "item %s", it.ID)
		require.True(t, want.Equal(it.Captured()), "item %s: captured %v, not %v", it.ID, want, it.Captured())
	}
	lim := b.e.limits(0)

	inserted := write(`INSERT INTO resources (id, payload) VALUES (1, '{}'), (2, '{}')`)
	deleted := write(`DELETE FROM resources WHERE id = 2`)
	for _, f := range []Feed{b.e.liveFeed(lim, ""), b.e.liveFeed(lim, "resources"), b.e.replayFeed(1, resources.Filter{}, lim)} {
		items := first(f)
		require.Len(t, items, 2, f.Checkpoint())
		same(inserted, items[0])
		require.True(t, items[1].Deleted)
		same(deleted, items[1])
	}

	_, err := b.pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, note text);
		CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, name text)`)
	require.NoError(t, err)
	specs := []sources.Spec{
		{Name: "orders", Table: "orders", Keys: []string{"id"}, Key: "id", Destination: "crm"},
		{Name: "contacts", Table: "contacts", Keys: []string{"id"}, Key: "id", Destination: "crm", Tenant: "account", Lanes: 4},
	}
	_, err = sources.Install(ctx, b.pool, specs)
	require.NoError(t, err)
	srcs, err := sources.Resolve(ctx, b.pool, specs)
	require.NoError(t, err)
	orders, contacts := srcs[0], srcs[1]
	require.Equal(t, "contacts", contacts.Name)

	write(`INSERT INTO orders VALUES (1, 'a'), (2, 'b')`)
	updated := write(`UPDATE orders SET note = 'c'`)
	plain, kept := b.e.sourceFeed(orders, 0), b.e.sourceFeed(orders, 0)
	kept.kept = true
	for _, f := range []Feed{plain, kept} {
		items := first(f)
		require.Len(t, items, 2)
		for _, it := range items {
			same(updated, it)
		}
	}

	inserted = write(`INSERT INTO contacts VALUES (1, 'acme', 'a'), (2, 'acme', 'b')`)
	lane := &laneFeed{pool: b.pool, src: contacts, lane: sources.Lane("acme", contacts.Lanes), name: "syncer_source:contacts$lane",
		lim: lim, tenants: oneDest{pacedDest{}}, now: time.Now, logger: slog.New(slog.DiscardHandler)}
	items := first(lane)
	require.Len(t, items, 2)
	for _, it := range items {
		require.Equal(t, "acme", it.Tenant)
		same(inserted, it)
	}
}
