package checkpoint_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return dbtest.NewMigrated(t).Pool
}

// send sends b as the exporter does, reading every result (which runs the
// queued callbacks).
func send(t *testing.T, pool *pgxpool.Pool, b *pgx.Batch) {
	t.Helper()
	require.NoError(t, pool.SendBatch(t.Context(), b).Close())
}

func record(t *testing.T, pool *pgxpool.Pool, name string, lastID int64, bs ...checkpoint.Batch) []int64 {
	t.Helper()
	var seqs []int64
	b := &pgx.Batch{}
	checkpoint.QueueRecord(b, name, lastID, bs, &seqs, checkpoint.Progress{})
	send(t, pool, b)
	require.Len(t, seqs, len(bs))
	return seqs
}

func TestNames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		want checkpoint.Owner
	}{
		{name: checkpoint.Live, want: checkpoint.Owner{Kind: checkpoint.KindLive}},
		{name: checkpoint.Replay(42), want: checkpoint.Owner{Kind: checkpoint.KindReplay, ReplayID: 42}},
		{name: checkpoint.Source("orders"), want: checkpoint.Owner{Kind: checkpoint.KindSource, Source: "orders"}},
		// A source may be named like anything, a replay's name included.
		{name: checkpoint.Source("replay:7"), want: checkpoint.Owner{Kind: checkpoint.KindSource, Source: "replay:7"}},
		{name: "replay:x", want: checkpoint.Owner{Kind: checkpoint.KindLive}},
		{name: "replay:", want: checkpoint.Owner{Kind: checkpoint.KindLive}},
		{name: checkpoint.Source("contacts@3"), want: checkpoint.Owner{Kind: checkpoint.KindSource, Source: "contacts", Lane: 3, Laned: true}},
		{name: "source:a@x", want: checkpoint.Owner{Kind: checkpoint.KindSource, Source: "a@x"}},
	} {
		require.Equal(t, tt.want, checkpoint.OwnerOf(tt.name), tt.name)
	}
}

func TestGetOfANameNeverRecordedIsTheStart(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	cp, err := checkpoint.Get(t.Context(), pool, checkpoint.Live)
	require.NoError(t, err)
	require.Equal(t, checkpoint.Checkpoint{Name: checkpoint.Live}, cp)
}

// A recorded batch comes back byte for byte, with its key, salt and time,
// in the order recorded across checkpoints; the position moves with the
// records.
func TestRecordedBatchesComeBackExactlyInOrder(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	at := time.Date(2026, 11, 25, 22, 0, 0, 0, time.UTC)
	body := func(s string) []byte { return []byte(`{"items":[` + strings.Repeat(s, 200) + `]}`) }
	a := []checkpoint.Batch{
		{Key: "k1", Salt: "s1", Items: 2, Time: at, Body: body(`{"id":"1"},`)},
		{Key: "k2", Salt: "s2", Items: 1, Time: at.Add(time.Second), Body: body(`{"id":"2"},`)},
	}
	seqA := record(t, pool, checkpoint.Live, 20, a...)
	b := checkpoint.Batch{Key: "k3", Salt: "s3", Items: 1, Body: []byte(`{}`)} // recorded at its recording
	c := checkpoint.Batch{Key: "k4", Salt: "s4", Items: 3, Time: at, Body: body("x")}
	seqB := record(t, pool, checkpoint.Replay(1), 5, b)
	seqC := record(t, pool, checkpoint.Live, 30, c)
	require.Less(t, seqA[0], seqA[1])
	require.Less(t, seqA[1], seqB[0])
	require.Less(t, seqB[0], seqC[0])

	recs, err := checkpoint.Recorded(ctx, pool)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	for i, want := range []struct {
		name string
		seq  int64
		b    checkpoint.Batch
	}{
		{checkpoint.Live, seqA[0], a[0]},
		{checkpoint.Live, seqA[1], a[1]},
		{checkpoint.Replay(1), seqB[0], b},
		{checkpoint.Live, seqC[0], c},
	} {
		got := recs[i]
		require.Equal(t, want.name, got.Name)
		require.Equal(t, want.seq, got.Seq)
		require.Equal(t, want.b.Key, got.Key)
		require.Equal(t, want.b.Salt, got.Salt)
		require.Equal(t, want.b.Items, got.Items)
		require.Equal(t, want.b.Body, got.Body, "byte for byte")
		if want.b.Time.IsZero() {
			require.WithinDuration(t, time.Now(), got.Time, time.Minute, "the time of recording")
		} else {
			require.True(t, want.b.Time.Equal(got.Time), "the batch's own time: %s", got.Time)
		}
	}

	live, err := checkpoint.Get(ctx, pool, checkpoint.Live)
	require.NoError(t, err)
	require.True(t, live.Positioned)
	require.Equal(t, int64(30), live.LastID)
	require.Equal(t, 3, live.InFlight)
}

func TestForgetAndSetPosition(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	seqs := record(t, pool, checkpoint.Live, 30,
		checkpoint.Batch{Key: "a", Salt: "a", Items: 1, Body: []byte("a")},
		checkpoint.Batch{Key: "b", Salt: "b", Items: 1, Body: []byte("b")},
		checkpoint.Batch{Key: "c", Salt: "c", Items: 1, Body: []byte("c")})

	// The first marked (forgotten in the marking transaction's batch), the
	// last never sent: forgotten and the position moved back before it.
	b := &pgx.Batch{}
	checkpoint.QueueForget(b, seqs[:1])
	checkpoint.QueueForget(b, nil) // nothing queued for nothing
	require.Equal(t, 1, b.Len())
	send(t, pool, b)
	require.NoError(t, checkpoint.Forget(ctx, pool, seqs[2:]))
	require.NoError(t, checkpoint.Forget(ctx, pool, nil))
	require.NoError(t, checkpoint.SetPosition(ctx, pool, checkpoint.Live, 20))

	recs, err := checkpoint.Recorded(ctx, pool)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "b", recs[0].Key)
	cp, err := checkpoint.Get(ctx, pool, checkpoint.Live)
	require.NoError(t, err)
	require.Equal(t, int64(20), cp.LastID)
	require.Equal(t, 1, cp.InFlight)
}

func TestAdvanceAddsUpAndListShowsEveryCheckpoint(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	b := &pgx.Batch{}
	// Advancing a checkpoint never positioned creates it.
	checkpoint.QueueAdvance(b, checkpoint.Replay(3), checkpoint.Progress{Rows: 10, Batches: 1})
	checkpoint.QueueAdvance(b, checkpoint.Replay(3), checkpoint.Progress{Rows: 5, Failed: 2, Batches: 1})
	checkpoint.QueueAdvance(b, checkpoint.Live, checkpoint.Progress{Rows: 1, Batches: 1})
	send(t, pool, b)
	record(t, pool, checkpoint.Live, 7, checkpoint.Batch{Key: "k", Salt: "s", Items: 1, Body: []byte("{}")})

	cps, err := checkpoint.List(ctx, pool)
	require.NoError(t, err)
	require.Len(t, cps, 2)
	require.Equal(t, checkpoint.Live, cps[0].Name, "sorted by name")
	require.Equal(t, int64(7), cps[0].LastID)
	require.Equal(t, 1, cps[0].InFlight)
	r := cps[1]
	require.Equal(t, checkpoint.Replay(3), r.Name)
	require.Equal(t, int64(15), r.RowsDone)
	require.Equal(t, int64(2), r.RowsFailed)
	require.Equal(t, int64(2), r.BatchesDone)
	require.Zero(t, r.InFlight)
}

func TestRecordAndPositionAreOneTransaction(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	// Sent in a transaction that rolls back: neither the batch nor the
	// position remains.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var seqs []int64
		b := &pgx.Batch{}
		checkpoint.QueueRecord(b, checkpoint.Live, 9, []checkpoint.Batch{{Key: "k", Salt: "s", Items: 1, Body: []byte("{}")}}, &seqs, checkpoint.Progress{})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return context.Canceled
	})
	require.ErrorIs(t, err, context.Canceled)
	recs, err := checkpoint.Recorded(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, recs)
	cp, err := checkpoint.Get(ctx, pool, checkpoint.Live)
	require.NoError(t, err)
	require.False(t, cp.Positioned)
}

func TestInstallationIsMadeOnceAndKept(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	a, err := checkpoint.Installation(t.Context(), pool)
	require.NoError(t, err)
	require.NotEmpty(t, a)
	b, err := checkpoint.Installation(t.Context(), pool)
	require.NoError(t, err)
	require.Equal(t, a, b)
	other, err := checkpoint.Installation(t.Context(), setup(t))
	require.NoError(t, err)
	require.NotEqual(t, a, other, "two installations never share a key salt")
}

func TestQueueRecordOfNothingQueuesNothing(t *testing.T) {
	t.Parallel()
	b := &pgx.Batch{}
	var seqs []int64
	checkpoint.QueueRecord(b, checkpoint.Live, 1, nil, &seqs, checkpoint.Progress{})
	require.Zero(t, b.Len())
}

// A record that advances adds the marked batches' counts in the statement
// that moves the position: both land, whether the row existed or not.
func TestRecordAdvancingAddsTheCounts(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	for i, lastID := range []int64{4, 9} {
		var seqs []int64
		b := &pgx.Batch{}
		checkpoint.QueueRecord(b, checkpoint.Live, lastID,
			[]checkpoint.Batch{{Key: fmt.Sprint("k", i), Salt: "s", Items: 1, Body: []byte("{}")}}, &seqs,
			checkpoint.Progress{Rows: 3, Failed: 1, Batches: 2})
		send(t, pool, b)
		require.Len(t, seqs, 1)
	}
	cp, err := checkpoint.Get(ctx, pool, checkpoint.Live)
	require.NoError(t, err)
	require.Equal(t, int64(9), cp.LastID)
	require.Equal(t, int64(6), cp.RowsDone)
	require.Equal(t, int64(2), cp.RowsFailed)
	require.Equal(t, int64(4), cp.BatchesDone)
	require.Equal(t, 2, cp.InFlight)
}
