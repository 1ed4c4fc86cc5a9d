package exporter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// scripted is a Destination whose answers a test scripts by call number. It
// checks the pipeline's rules on every call: no batch is pushed before a
// committed record holds its exact body under its key, no id is in two
// unanswered calls, and no more than the limit are unanswered at once.
type scripted struct {
	t      *testing.T
	pool   *pgxpool.Pool
	answer func(ctx context.Context, k int, b delivery.Batch) (*delivery.Outcome, error)

	mu          sync.Mutex
	calls       []delivery.Batch
	inflight    int
	maxInflight int
	busy        map[string]bool
	overlaps    int
	unrecorded  int
	sent        map[string][]int64 // versions of each id, in the order sent
	// limit is the destination's requests in flight.
	limit int
}

func (s *scripted) MaxInFlight() int { return s.limit }

func (s *scripted) Deliver(ctx context.Context, b delivery.Batch) (*delivery.Outcome, error) {
	recs, err := checkpoint.Recorded(context.WithoutCancel(ctx), s.pool)
	recorded := false
	for _, r := range recs {
		recorded = recorded || (r.Key == b.Key && string(r.Body) == string(b.Body))
	}
	s.mu.Lock()
	k := len(s.calls)
	s.calls = append(s.calls, b)
	if err != nil || !recorded {
		s.unrecorded++
	}
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	for _, it := range b.Items {
		if s.busy[it.ID] {
			s.overlaps++
		}
		s.busy[it.ID] = true
		s.sent[it.ID] = append(s.sent[it.ID], it.Version)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inflight--
		for _, it := range b.Items {
			delete(s.busy, it.ID)
		}
	}()
	if s.answer != nil {
		return s.answer(ctx, k, b)
	}
	return &delivery.Outcome{Accepted: b.Items, Requests: 1}, nil
}

func (s *scripted) snapshot() (calls []delivery.Batch, maxInflight, overlaps, unrecorded int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery.Batch(nil), s.calls...), s.maxInflight, s.overlaps, s.unrecorded
}

type pipelineBundle struct {
	pool   *pgxpool.Pool
	e      *Exporter
	lk     *locks.Lock
	pusher *scripted
	// src is resources, the one source exported.
	src exported
}

// rows is resources' live target.
func (b *pipelineBundle) rows() target { return b.src.live() }

// run is a job's execution of resources under b.lk, started now by the
// exporter's clock.
func (b *pipelineBundle) run(t *testing.T) *run {
	r := &run{s: b.src, lk: b.lk, t: b.e.newTurn(t.Context(), b.src.base()), started: b.e.now()}
	t.Cleanup(func() { r.t.done(context.Background()) })
	return r
}

// setupPipeline returns an exporter of resources to a scripted destination
// that takes inFlight batches at once (0: 4, delivery's default).
func setupPipeline(t *testing.T, cfg Config, inFlight ...int) *pipelineBundle {
	t.Helper()
	ctx := t.Context()
	ts := dbtest.NewMigrated(t)
	pool, schema := ts.Pool, ts.Name
	inst, err := checkpoint.Installation(ctx, pool)
	require.NoError(t, err)
	locker, err := locks.New(pool.Config().ConnConfig, nil)
	require.NoError(t, err)
	// Closed after the lock's release (cleanups run last first): the
	// Locker's own pool of its transactions' connections goes with it.
	t.Cleanup(locker.Close)
	p := &scripted{t: t, pool: pool, busy: map[string]bool{}, sent: map[string][]int64{}, limit: 4}
	if len(inFlight) > 0 {
		p.limit = inFlight[0]
	}
	cfg.Schema, cfg.Installation = schema, inst
	cfg.Sources = []Source{Resources(p)}
	e, err := New(pool, locker, &cfg)
	require.NoError(t, err)
	lk, err := locker.TryAcquire(ctx, e.LockKey(jobs.Resources))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	return &pipelineBundle{pool: pool, e: e, lk: lk, pusher: p, src: e.sourcesNow()[jobs.Resources]}
}

func (b *pipelineBundle) insert(t *testing.T, n int) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO resources (payload)
		SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
}

func (b *pipelineBundle) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM resources WHERE `+where).Scan(&n))
	return n
}

func (b *pipelineBundle) recorded(t *testing.T) []checkpoint.Batch {
	t.Helper()
	recs, err := checkpoint.Recorded(t.Context(), b.pool)
	require.NoError(t, err)
	return recs
}

// passAll runs one pass over resources' live rows from the start, bound
// by neither a number of batches nor a time.
func (b *pipelineBundle) passAll(t *testing.T) (passResult, error) {
	return b.e.pass(t.Context(), b.lk, b.rows(), feed.Start, 0, time.Time{})
}

// slow answers after d, or fails when the context ends first.
func slow(d time.Duration) func(ctx context.Context, k int, b delivery.Batch) (*delivery.Outcome, error) {
	return func(ctx context.Context, k int, b delivery.Batch) (*delivery.Outcome, error) {
		select {
		case <-time.After(d):
			return &delivery.Outcome{Accepted: b.Items, Requests: 1}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func TestPipelineKeepsItsLimits(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprint(n, " in flight"), func(t *testing.T) {
			t.Parallel()
			b := setupPipeline(t, Config{BatchSize: 10}, n)
			b.pusher.answer = slow(5 * time.Millisecond)
			b.insert(t, 400)

			res, err := b.passAll(t)
			require.NoError(t, err)
			require.True(t, res.done)
			require.Equal(t, 400, res.rows)

			calls, maxInflight, overlaps, unrecorded := b.pusher.snapshot()
			require.Len(t, calls, 40)
			require.LessOrEqual(t, maxInflight, n, "never more than MaxInFlight unanswered")
			require.Zero(t, overlaps, "no id in two unanswered requests")
			require.Zero(t, unrecorded, "every batch recorded, body and key, before its push")
			require.Equal(t, 400, b.count(t, "synced_at IS NOT NULL"))
			require.Empty(t, b.recorded(t), "marked batches are forgotten")
		})
	}
}

func TestPipelineFailureAtBatchKLeavesExactlyTheSentBatchesRecorded(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10}, 4)
	b.insert(t, 200)
	const k = 7
	refused := errors.New("scripted: third party unavailable")
	b.pusher.answer = func(ctx context.Context, i int, bt delivery.Batch) (*delivery.Outcome, error) {
		if i >= k {
			return nil, &delivery.WaitError{Err: refused, Wait: time.Second}
		}
		return slow(2*time.Millisecond)(ctx, i, bt)
	}

	_, err := b.passAll(t)
	require.ErrorIs(t, err, refused)

	calls, _, overlaps, unrecorded := b.pusher.snapshot()
	require.Zero(t, overlaps)
	require.Zero(t, unrecorded)
	failed := map[string][]byte{}
	for _, c := range calls[k:] {
		failed[c.Key] = c.Body
	}
	recs := b.recorded(t)
	require.Len(t, recs, len(failed), "exactly the batches sent and not answered stay recorded")
	for _, r := range recs {
		require.Equal(t, failed[r.Key], r.Body, "recorded byte for byte")
	}
	require.Equal(t, 10*k, b.count(t, "synced_at IS NOT NULL"), "every answered batch is marked")

	// Rows of the recorded batches change meanwhile: the resend is still the
	// recorded body, and only the recorded versions can be marked by it.
	_, err = b.pool.Exec(t.Context(), `UPDATE resources SET payload = '{"changed": true}' WHERE id IN (SELECT min(id) FROM resources WHERE synced_at IS NULL)`)
	require.NoError(t, err)

	b.pusher.answer = nil
	require.NoError(t, b.e.resume(t.Context(), b.lk, b.rows(), b.src.owns))
	after, _, _, unrecorded := b.pusher.snapshot()
	require.Zero(t, unrecorded)
	resent := after[len(calls):]
	require.Len(t, resent, len(recs), "resume resends exactly the recorded batches")
	for i, r := range recs {
		require.Equal(t, r.Key, resent[i].Key, "in the order recorded, under their keys")
		require.Equal(t, r.Body, resent[i].Body, "byte for byte")
	}
	require.Empty(t, b.recorded(t))

	res, err := b.passAll(t)
	require.NoError(t, err)
	require.True(t, res.done)
	require.Equal(t, 200, b.count(t, "synced_at IS NOT NULL"))
	b.pusher.mu.Lock()
	defer b.pusher.mu.Unlock()
	for id, vs := range b.pusher.sent {
		for i := 1; i < len(vs); i++ {
			require.LessOrEqual(t, vs[i-1], vs[i], "versions of id %d sent in increasing order", id)
		}
	}
}

func TestPipelineCancelledMidPushMarksWhatWasAnswered(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10}, 4)
	b.insert(t, 200)
	ctx, cancel := context.WithCancel(t.Context())
	const k = 5
	b.pusher.answer = func(c context.Context, i int, bt delivery.Batch) (*delivery.Outcome, error) {
		if i == k {
			cancel() // the shutdown timeout, or the lock lost
		}
		if i >= k {
			<-c.Done()
			return nil, c.Err()
		}
		return &delivery.Outcome{Accepted: bt.Items, Requests: 1}, nil
	}
	_, err := b.e.pass(ctx, b.lk, b.rows(), feed.Start, 0, time.Time{})
	require.ErrorIs(t, err, context.Canceled)

	calls, maxInflight, _, unrecorded := b.pusher.snapshot()
	require.LessOrEqual(t, maxInflight, 4)
	require.Zero(t, unrecorded)
	synced := b.count(t, "synced_at IS NOT NULL")
	require.Equal(t, 10*k, synced, "the answered batches are marked despite the cancellation")
	require.Len(t, b.recorded(t), len(calls)-k, "the cancelled pushes stay recorded for the next holder")
}

func TestPipelineRejectionsFailOnlyTheirVersion(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10}, 4)
	b.insert(t, 50)
	b.pusher.answer = func(ctx context.Context, i int, bt delivery.Batch) (*delivery.Outcome, error) {
		out := &delivery.Outcome{Requests: 1}
		for _, it := range bt.Items {
			if id, _ := strconv.Atoi(it.ID); id%7 == 0 {
				out.Rejected = append(out.Rejected, delivery.Rejection{Item: it, Error: "no sevens"})
			} else {
				out.Accepted = append(out.Accepted, it)
			}
		}
		return out, nil
	}
	_, err := b.passAll(t)
	require.NoError(t, err)
	require.Equal(t, 7, b.count(t, "failed_at IS NOT NULL AND sync_error = 'no sevens'"))
	require.Equal(t, 43, b.count(t, "synced_at IS NOT NULL"))
}

func TestPipelineStopSendsNothingMoreAndForgetsUnsent(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10}, 2)
	b.insert(t, 300)
	b.pusher.answer = func(ctx context.Context, i int, bt delivery.Batch) (*delivery.Outcome, error) {
		if i == 3 {
			b.e.Shutdown()
		}
		return &delivery.Outcome{Accepted: bt.Items, Requests: 1}, nil
	}
	_, err := b.passAll(t)
	require.ErrorIs(t, err, errStopping)
	calls, _, _, _ := b.pusher.snapshot()
	require.Less(t, len(calls), 30)
	require.Equal(t, 10*len(calls), b.count(t, "synced_at IS NOT NULL"), "everything sent is marked")
	require.Empty(t, b.recorded(t), "batches recorded and never sent are forgotten")
}

func TestPipelineKeysAreTheInstallations(t *testing.T) {
	t.Parallel()
	one := setupPipeline(t, Config{BatchSize: 10})
	two := setupPipeline(t, Config{BatchSize: 10})
	for _, b := range []*pipelineBundle{one, two} {
		b.insert(t, 10)
		_, err := b.passAll(t)
		require.NoError(t, err)
	}
	c1, _, _, _ := one.pusher.snapshot()
	c2, _, _, _ := two.pusher.snapshot()
	require.Equal(t, c1[0].Body, c2[0].Body, "the same ids, versions and payloads")
	require.NotEqual(t, c1[0].Key, c2[0].Key, "two installations never share a key")
	require.Equal(t, thirdparty.BatchKey(one.e.cfg.Installation, "", c1[0].Body), c1[0].Key)
}

func TestPipelineExportsEveryBigintID(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 2})
	_, err := b.pool.Exec(t.Context(), `INSERT INTO resources (id, payload) VALUES
		(-9223372036854775808, '{}'), (-1, '{}'), (0, '{}'), (1, '{}'), (9223372036854775807, '{}')`)
	require.NoError(t, err)
	res, err := b.passAll(t)
	require.NoError(t, err)
	require.Equal(t, 5, res.rows)
	require.Equal(t, 5, b.count(t, "synced_at IS NOT NULL"))
}

func TestResumeThatFailsForgetsNothing(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10}, 4)
	b.insert(t, 100)
	refused := errors.New("scripted: down")
	b.pusher.answer = func(ctx context.Context, i int, bt delivery.Batch) (*delivery.Outcome, error) {
		if i >= 2 {
			return nil, &delivery.WaitError{Err: refused, Wait: time.Second}
		}
		return &delivery.Outcome{Accepted: bt.Items, Requests: 1}, nil
	}
	_, err := b.passAll(t)
	require.ErrorIs(t, err, refused)
	recs := b.recorded(t)
	require.NotEmpty(t, recs)
	cp, err := checkpoint.Get(t.Context(), b.pool, checkpoint.Live)
	require.NoError(t, err)

	// The next holder's resend fails too: what was recorded stays, under
	// its keys, and the position does not move.
	require.ErrorIs(t, b.e.resume(t.Context(), b.lk, b.rows(), b.src.owns), refused)
	again := b.recorded(t)
	require.Equal(t, len(recs), len(again), "a failed resume forgets no recorded batch")
	for i := range recs {
		require.Equal(t, recs[i].Key, again[i].Key)
	}
	cp2, err := checkpoint.Get(t.Context(), b.pool, checkpoint.Live)
	require.NoError(t, err)
	require.Equal(t, cp.LastID, cp2.LastID)
}

// A marker transaction that fails while the next one is already on the
// lock's session: the next commits nothing, so whatever the failed one
// would have marked or recorded is still sent and recorded, or still
// pending below the position, and the next holder finishes the job.
func TestPipelineFailedMarkCommitsNothingBehindIt(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10}, 4)
	b.insert(t, 300)
	// The marks of the batch holding the 105th row fail, whichever
	// transaction carries them.
	var refused int64
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT min(id) + 104 FROM resources`).Scan(&refused))
	_, err := b.pool.Exec(t.Context(), fmt.Sprintf(`
		CREATE FUNCTION refuse_mark() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'scripted: mark refused'; END $$;
		CREATE TRIGGER refuse_mark BEFORE UPDATE ON resources FOR EACH ROW
			WHEN (NEW.synced_at IS NOT NULL AND NEW.id = %d)
			EXECUTE FUNCTION refuse_mark()`, refused))
	require.NoError(t, err)
	b.pusher.answer = slow(time.Millisecond)

	_, err = b.passAll(t)
	require.ErrorContains(t, err, "scripted: mark refused")
	require.NoError(t, b.lk.Err(), "a failed mark keeps the lock")

	// Every batch sent is marked or still recorded, under its key.
	calls, _, overlaps, unrecorded := b.pusher.snapshot()
	require.Zero(t, overlaps)
	require.Zero(t, unrecorded)
	recorded := map[string]bool{}
	for _, r := range b.recorded(t) {
		recorded[r.Key] = true
	}
	for _, c := range calls {
		var synced int
		ids := make([]string, len(c.Items))
		for i, it := range c.Items {
			ids[i] = it.ID
		}
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM resources WHERE id = ANY($1::text[]::bigint[]) AND synced_at IS NOT NULL`, ids).Scan(&synced))
		require.True(t, synced == len(ids) || recorded[c.Key], "batch %s: %d of %d marked and not recorded", c.Key, synced, len(ids))
		require.True(t, synced == 0 || synced == len(ids), "a batch is marked whole or not at all")
	}
	// Every row up to the position is marked or in a recorded batch.
	cp, err := checkpoint.Get(t.Context(), b.pool, checkpoint.Live)
	require.NoError(t, err)
	inRecords := map[string]bool{}
	for _, r := range b.recorded(t) {
		items, err := thirdparty.DecodeBatch(r.Body)
		require.NoError(t, err)
		for _, it := range items {
			inRecords[it.ID] = true
		}
	}
	rows, err := b.pool.Query(t.Context(), `SELECT id::text FROM resources WHERE synced_at IS NULL AND id <= $1`, cp.LastID)
	require.NoError(t, err)
	pendingBelow, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, id := range pendingBelow {
		require.True(t, inRecords[id], "row %s is below the position (%d), pending and in no recorded batch", id, cp.LastID)
	}

	_, err = b.pool.Exec(t.Context(), `DROP TRIGGER refuse_mark ON resources`)
	require.NoError(t, err)
	require.NoError(t, b.e.resume(t.Context(), b.lk, b.rows(), b.src.owns))
	res, err := b.passAll(t)
	require.NoError(t, err)
	require.True(t, res.done)
	require.Equal(t, 300, b.count(t, "synced_at IS NOT NULL"))
	require.Empty(t, b.recorded(t))
}
