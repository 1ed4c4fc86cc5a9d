package exporter

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// The stages of a batch, each alone: what one does needs no pipeline,
// no lock and no database.

func keptItem(tag, id, payload string, kept bool) feed.Item {
	it := feed.Item{ID: id, Version: 1, Payload: []byte(payload)}
	if kept {
		var dg unchanged.Digester
		it.Meta = feed.MetaOf(new([]feed.Meta), 1, "", dg.Append(nil, tag, it))
	} else {
		it.Meta = feed.MetaOf(new([]feed.Meta), 1, "", []byte("another body's digest"))
	}
	return it
}

// The unchanged stage moves an item whose body the third party has to
// Unchanged, keeps the order of the rest, and never skips a key in doubt.
func TestBodiesLeaveUnchanged(t *testing.T) {
	t.Parallel()
	b := &bodies{feed: "orders", tag: "json", skip: true}
	page := feed.Page{Kept: true, Items: []feed.Item{
		keptItem("json", "a", `{"a":1}`, false),
		keptItem("json", "b", `{"b":1}`, true),
		keptItem("json", "c", `{"c":1}`, false),
		keptItem("json", "d", `{"d":1}`, true),
	}}
	b.leave(&page, map[string]struct{}{"d": {}})
	ids := func(its []feed.Item) (out []string) {
		for _, it := range its {
			out = append(out, it.ID)
		}
		return out
	}
	require.Equal(t, []string{"a", "c", "d"}, ids(page.Items), "d is in doubt: sent")
	require.Equal(t, []string{"b"}, ids(page.Unchanged))

	for _, tt := range []struct {
		name string
		b    *bodies
		kept bool
	}{
		{"no comparison", nil, true},
		{"a replay's", &bodies{feed: "resources", tag: "json"}, true},
		{"a read without digests", b, false},
	} {
		page := feed.Page{Kept: tt.kept, Items: []feed.Item{keptItem("json", "b", `{"b":1}`, true)}}
		tt.b.leave(&page, nil)
		require.Len(t, page.Items, 1, tt.name)
		require.Empty(t, page.Unchanged, tt.name)
	}
}

// The story stage of a history-less export writes nothing; otherwise one
// statement a batch, and a lane's batch names its tenant.
func TestStoryQueuesOneStatementABatch(t *testing.T) {
	t.Parallel()
	var none *story
	qb := &pgx.Batch{}
	b := &batch{name: "source:orders@1", salt: tenantSalt("source:orders@1", "acme"),
		out: &delivery.Outcome{Accepted: []feed.Item{{ID: "1", Version: 1}}}}
	none.queue(qb, b, nil)
	none.writeWaited(t.Context(), b, &delivery.WaitError{Attempts: []delivery.Attempt{{}}})
	require.Zero(t, qb.Len())

	s := &story{dest: "crm", logger: slog.New(slog.DiscardHandler)}
	s.queue(qb, b, nil)
	require.Equal(t, 1, qb.Len())
	h := s.of(b, nil)
	require.Equal(t, "acme", h.Tenant)
	require.Equal(t, "orders", h.Feed)
	require.Equal(t, "crm", h.Destination)
}

// destFunc is a Destination that answers with a function.
type destFunc func(context.Context, delivery.Batch) (*delivery.Outcome, error)

func (d destFunc) Deliver(ctx context.Context, b delivery.Batch) (*delivery.Outcome, error) {
	return d(ctx, b)
}
func (destFunc) MaxInFlight() int { return 1 }

// The push stage hands the batch as recorded to its destination, keeps
// its key as the run's last, and wraps a failure with the key.
func TestPusherDeliversTheBatchAsRecorded(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b := &batch{name: "source:orders", key: "k1", salt: "s", body: []byte("[]"), at: at, resent: true,
		items: []feed.Item{{ID: "1", Version: 2}}}
	var got delivery.Batch
	ok := destFunc(func(_ context.Context, db delivery.Batch) (*delivery.Outcome, error) {
		got = db
		return &delivery.Outcome{Accepted: db.Items}, nil
	})
	lk := new(locks.Lock)
	keys := &lastKeys{}
	p := &pusher{dest: ok, lastKeys: keys, lk: lk, logger: slog.New(slog.DiscardHandler)}
	out, err := p.push(t.Context(), b)
	require.NoError(t, err)
	require.Len(t, out.Accepted, 1)
	require.Equal(t, delivery.Batch{Key: "k1", Salt: "s", Items: b.items, Body: b.body, Source: "orders", Time: at, Resent: true}, got)
	require.Equal(t, "k1", keys.take(lk))

	boom := errors.New("boom")
	p.dest = destFunc(func(context.Context, delivery.Batch) (*delivery.Outcome, error) { return nil, boom })
	_, err = p.push(t.Context(), b)
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "k1")
	require.Empty(t, keys.take(lk), "a failed push is no run's last key")
}

// Issue 54: a batch withdrawn at its lane's pass end (nothing of it sent)
// is no push: not the run's last key, not counted.
func TestPusherWithdrawnBatchIsNoPush(t *testing.T) {
	t.Parallel()
	b := &batch{name: "source:orders", key: "k1", salt: "s", body: []byte("[]"), items: []feed.Item{{ID: "1", Version: 2}}}
	withdrawn := destFunc(func(context.Context, delivery.Batch) (*delivery.Outcome, error) {
		return &delivery.Outcome{Withdrawn: true}, nil
	})
	lk := new(locks.Lock)
	keys := &lastKeys{}
	p := &pusher{dest: withdrawn, lastKeys: keys, lk: lk, logger: slog.New(slog.DiscardHandler)}
	out, err := p.push(t.Context(), b)
	require.NoError(t, err)
	require.True(t, out.Withdrawn)
	require.Empty(t, keys.take(lk), "a withdrawn batch is no run's last key")
}
