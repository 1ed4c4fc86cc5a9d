package exporter

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
)

// stepClock is a clock that moves step forward at every reading, so a rule
// of time (the run limit, a linger, a replay's hold) runs out after a
// known number of readings, without sleeping.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func newStepClock(step time.Duration) *stepClock {
	return &stepClock{t: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC), step: step}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// lingerRun runs linger on resources' feed with scripted drain, poll and
// yield, and returns what it returned and how many polls it made.
func lingerRun(t *testing.T, b *pipelineBundle, clk *stepClock, poll func(n int) int, yield func(polls int) bool) (total, polls int, err error) {
	t.Helper()
	a := b.e.wakers.awaken(jobs.Resources)
	defer a.end()
	f := &lingerFeed{
		awake: a, lk: b.lk, started: clk.Now(),
		drain: func(context.Context) (int, error) { return 1, nil },
		poll: func(context.Context, bool) (int, error) {
			polls++
			return poll(polls), nil
		},
	}
	if yield != nil {
		f.yield = func(context.Context) (bool, error) { return yield(polls), nil }
	}
	total, err = b.e.linger(t.Context(), f)
	return total, polls, err
}

func TestLingerEndsAtTheRunLimitWhileRowsKeepComing(t *testing.T) {
	t.Parallel()
	clk := newStepClock(time.Second)
	b := setupPipeline(t, Config{Now: clk.Now, MaxRun: 30 * time.Second, HotLinger: time.Hour})
	total, polls, err := lingerRun(t, b, clk, func(int) int { return 1 }, nil)
	require.ErrorIs(t, err, errMore, "a job whose rows keep coming snoozes at MaxRun, for the next to go on")
	require.Equal(t, 1+polls, total, "the drain's row and every poll's")
	require.Positive(t, polls)
	require.Less(t, polls, 30, "the run limit is read on the exporter's clock")
}

func TestLingerTurnsColdAndEndsWhenNothingComes(t *testing.T) {
	t.Parallel()
	clk := newStepClock(time.Second)
	b := setupPipeline(t, Config{Now: clk.Now, HotLinger: 5 * time.Second, HotPoll: time.Millisecond,
		ColdLinger: time.Millisecond, MaxRun: time.Hour})
	total, polls, err := lingerRun(t, b, clk, func(int) int { return 0 }, nil)
	require.NoError(t, err)
	require.Equal(t, 1, total)
	// Hot polls until HotLinger passed on the clock, then four more with
	// the gate open for writers that read it shut.
	require.GreaterOrEqual(t, polls, 5)
	require.Less(t, polls, 10)
	armed := 0
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM syncer_gate WHERE armed`).Scan(&armed))
	require.Equal(t, 1, armed, "the gate is open again once the job ends")
}

// What the last cold look carried is written before the job waits for a
// notification, never left pending through ColdLinger.
func TestLingerSettlesBeforeItWaitsCold(t *testing.T) {
	t.Parallel()
	clk := newStepClock(time.Second)
	b := setupPipeline(t, Config{Now: clk.Now, HotLinger: 5 * time.Second, HotPoll: time.Millisecond,
		ColdLinger: time.Millisecond, MaxRun: time.Hour})
	a := b.e.wakers.awaken(jobs.Resources)
	defer a.end()
	var polls, settledAt []int
	n := 0
	f := &lingerFeed{
		awake: a, lk: b.lk, started: clk.Now(),
		drain: func(context.Context) (int, error) { return 0, nil },
		poll: func(context.Context, bool) (int, error) {
			n++
			polls = append(polls, n)
			return 0, nil
		},
		settle: func(context.Context) error {
			settledAt = append(settledAt, n)
			return nil
		},
	}
	_, err := b.e.linger(t.Context(), f)
	require.NoError(t, err)
	require.Equal(t, []int{len(polls)}, settledAt, "settled once, after the last look, before the cold wait")
}

func TestLingerYieldsToAnotherSourceOfItsDestination(t *testing.T) {
	t.Parallel()
	clk := newStepClock(time.Second)
	b := setupPipeline(t, Config{Now: clk.Now, HotLinger: time.Hour, MaxRun: time.Hour})
	_, polls, err := lingerRun(t, b, clk, func(int) int { return 1 }, func(polls int) bool { return polls >= 3 })
	require.NoError(t, err, "a job that gives way ends, no snooze")
	require.Equal(t, 3, polls, "asked before every poll once yieldCheckEvery passed on the clock")
}

func TestLiveBatchesPerChunkKeepTheReplaysShare(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		chunk int
		share float64
		want  int
	}{
		{chunk: 4, share: 0.25, want: 12}, // the defaults: 4 of 16 batches
		{chunk: 4, share: 0.5, want: 4},
		{chunk: 4, share: 0.75, want: 1}, // 4 of 5: above the share, never below
		{chunk: 3, share: 0.4, want: 4},  // 3 of 7
		{chunk: 10, share: 0.1, want: 90},
		{chunk: 1, share: 1, want: 1}, // live rows are never starved
	} {
		got := liveBatchesPerChunk(tt.chunk, tt.share)
		require.Equal(t, tt.want, got, "chunk %d share %v", tt.chunk, tt.share)
		if tt.share < 1 {
			require.GreaterOrEqual(t, float64(tt.chunk)/float64(tt.chunk+got), tt.share-1e-9, "the replay's share")
		}
	}
}

// replaySetup leaves rows 1..synced exported and rows above pending, and a
// replay of 1..synced.
func replaySetup(t *testing.T, b *pipelineBundle, synced, pending int) replays.Replay {
	t.Helper()
	b.insert(t, synced)
	_, err := b.pool.Exec(t.Context(), `UPDATE resources SET synced_at = now()`)
	require.NoError(t, err)
	b.insert(t, pending)
	id, err := replays.Create(t.Context(), b.pool, replays.Request{Filter: resources.Filter{FromID: 1, ToID: int64(synced)}}, int64(synced))
	require.NoError(t, err)
	r, err := replays.Load(t.Context(), b.pool, id)
	require.NoError(t, err)
	return r
}

// kinds says, call by call, whether the scripted destination got a live
// batch ('L', ids above synced) or the replay's ('R').
func kinds(t *testing.T, b *pipelineBundle, synced int) string {
	t.Helper()
	b.pusher.mu.Lock()
	defer b.pusher.mu.Unlock()
	out := ""
	for _, c := range b.pusher.calls {
		id, err := strconv.Atoi(c.Items[0].ID)
		require.NoError(t, err)
		if id > synced {
			out += "L"
		} else {
			out += "R"
		}
	}
	return out
}

func TestReplayChunksTakeTurnsWithLiveRows(t *testing.T) {
	t.Parallel()
	// A clock that stands still: the replay's hold never ends.
	clk := newStepClock(0)
	b := setupPipeline(t, Config{Now: clk.Now, BatchSize: 10, ReplayChunkBatches: 1, ReplayShare: 0.5}, 1)
	r := replaySetup(t, b, 40, 40)
	_, err := b.e.replay(t.Context(), b.run(t), r)
	require.NoError(t, err)
	require.Equal(t, "LRLRLRLR", kinds(t, b, 40), "one live batch before each replay batch: half the batches each")
	st, err := replays.StateOf(t.Context(), b.pool, r.ID)
	require.NoError(t, err)
	require.Equal(t, replays.StateDone, st)
}

func TestReplayEndsAtTheRunLimit(t *testing.T) {
	t.Parallel()
	clk := newStepClock(time.Second)
	b := setupPipeline(t, Config{Now: clk.Now, BatchSize: 10, ReplayChunkBatches: 1, ReplayShare: 0.5,
		MaxRun: 3 * time.Second}, 1)
	r := replaySetup(t, b, 100, 0)
	_, err := b.e.replay(t.Context(), b.run(t), r)
	require.ErrorIs(t, err, errMore, "the job runs again at MaxRun on the exporter's clock, and goes on from the replay's checkpoint")
	sent := len(kinds(t, b, 100))
	require.Positive(t, sent)
	require.Less(t, sent, 10, "the replay is not done")
	st, err := replays.StateOf(t.Context(), b.pool, r.ID)
	require.NoError(t, err)
	require.Equal(t, replays.StateRunning, st)
}
