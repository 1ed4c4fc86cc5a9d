package heldkeys

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/holds"
)

// clock is a stubbed clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var policy = holds.Policy{Initial: time.Second, Max: time.Minute, Bound: time.Hour}

func item(tenant, key string) feed.Item {
	return feed.Item{ID: key, Version: 1, Meta: feed.MetaOf(new([]feed.Meta), 1, tenant, nil)}
}

// What a marker transaction queues is known only once it is applied; an
// answered key ends its hold at its own tenant only; a map handed out is
// never edited.
func TestQueueIsKnownOnceApplied(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	k := New(nil, c.now, slog.New(slog.DiscardHandler))
	f := Feed{Checkpoint: "source:contacts@1", Source: "contacts", Destination: "crm"}

	b := &pgx.Batch{}
	ch := k.Queue(b, f, []holds.Deferred{{Tenant: "acme", Key: "k1", Version: 1, Reason: "503"}, {Tenant: "beta", Key: "k1", Version: 1}}, nil, nil, policy)
	require.Equal(t, 1, b.Len(), "one statement holds both")
	require.Nil(t, k.Of(f.Checkpoint), "not known before it commits")
	k.Apply(t.Context(), []Change{ch})
	before := k.Of(f.Checkpoint)
	require.Len(t, before, 2)

	b = &pgx.Batch{}
	ch = k.Queue(b, f, nil, []feed.Item{item("acme", "k1"), item("acme", "other")}, nil, policy)
	require.Equal(t, 1, b.Len(), "one statement releases")
	k.Apply(t.Context(), []Change{ch})
	require.Equal(t, map[holds.ID]holds.Hold{{Tenant: "beta", Key: "k1"}: before[holds.ID{Tenant: "beta", Key: "k1"}]}, k.Of(f.Checkpoint),
		"acme's k1 released, beta's kept")
	require.Len(t, before, 2, "the map handed out before is not edited")

	b = &pgx.Batch{}
	k.Queue(b, Feed{Checkpoint: "live"}, nil, []feed.Item{item("", "k1")}, nil, policy)
	require.Zero(t, b.Len(), "nothing held: no release queued")
}

// A key deferred again at the same version counts one more try and keeps
// its first time.
func TestDeferredAgainCountsATry(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	k := New(nil, c.now, slog.New(slog.DiscardHandler))
	f := Feed{Checkpoint: "live"}
	d := []holds.Deferred{{Key: "k", Version: 3}}
	k.Apply(t.Context(), []Change{k.Queue(&pgx.Batch{}, f, d, nil, nil, policy)})
	since := k.Of("live")[holds.ID{Key: "k"}].Since
	c.add(5 * time.Second)
	k.Apply(t.Context(), []Change{k.Queue(&pgx.Batch{}, f, d, nil, nil, policy)})
	h := k.Of("live")[holds.ID{Key: "k"}]
	require.Equal(t, 2, h.Tries)
	require.Equal(t, since, h.Since)
}

// A pass reads past the keys whose time has not come; a hold another
// daemon wrote is seen at the next recheck, and while a key is held the
// table is read again every ReloadEvery; a replay holds nothing.
func TestHoldingReadsTheTableWhenItMayHaveChanged(t *testing.T) {
	t.Parallel()
	ts := dbtest.NewMigrated(t)
	ctx := t.Context()
	c := &clock{t: time.Now().UTC().Truncate(time.Second)}
	k := New(ts.Pool, c.now, slog.New(slog.DiscardHandler))

	got, err := k.Holding(ctx, "live")
	require.NoError(t, err)
	require.Empty(t, got)

	// Another daemon holds a key of the feed.
	other := New(ts.Pool, c.now, slog.New(slog.DiscardHandler))
	write := func(ch Change) {
		b := &pgx.Batch{}
		ch = other.Queue(b, Feed{Checkpoint: "live"}, ch.heldItems(), nil, nil, holds.Policy{Initial: time.Hour, Max: time.Hour, Bound: time.Hour})
		require.NoError(t, ts.Pool.SendBatch(ctx, b).Close())
		other.Apply(ctx, []Change{ch})
	}
	write(Change{held: []holds.Hold{{Key: "k", Version: 7}}})

	got, err = k.Holding(ctx, "live")
	require.NoError(t, err)
	require.Empty(t, got, "read within RecheckEvery: not seen yet")
	c.add(RecheckEvery)
	got, err = k.Holding(ctx, "live")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, int64(7), got[0].Version)

	// Released elsewhere: seen within ReloadEvery while any is held.
	_, err = holds.Clear(ctx, ts.Pool, "live", []string{"k"})
	require.NoError(t, err)
	c.add(ReloadEvery)
	got, err = k.Holding(ctx, "live")
	require.NoError(t, err)
	require.Empty(t, got)

	got, err = k.Holding(ctx, checkpoint.Replay(1))
	require.NoError(t, err)
	require.Nil(t, got)
}

// heldItems are ch's holds as deferred items, for a test to write them.
func (ch Change) heldItems() []holds.Deferred {
	out := make([]holds.Deferred, len(ch.held))
	for i, h := range ch.held {
		out[i] = holds.Deferred{Tenant: h.Tenant, Key: h.Key, Version: h.Version}
	}
	return out
}
