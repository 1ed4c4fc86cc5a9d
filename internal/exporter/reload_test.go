package exporter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// A job whose push ignores its context (a program that spins) is asked to
// stop by a reload: it is abandoned within the bound, River's slot is freed
// (the job snoozes), its lock is free at once for the next job, which
// resends the recorded batch under the same key to the destination the
// reload swapped in; the abandoned goroutine, once it returns, sends and
// marks nothing more.
func TestStopAbandonsAJobThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ts := dbtest.NewMigrated(t)
	pool := ts.Pool
	inst, err := checkpoint.Installation(ctx, pool)
	require.NoError(t, err)
	locker, err := locks.New(pool.Config().ConnConfig, &locks.Config{Lease: true})
	require.NoError(t, err)
	t.Cleanup(locker.Close)

	entered, release := make(chan struct{}), make(chan struct{})
	stuck := &scripted{t: t, pool: pool, busy: map[string]bool{}, sent: map[string][]int64{}, limit: 1,
		answer: func(_ context.Context, k int, b delivery.Batch) (*delivery.Outcome, error) {
			if k == 0 {
				close(entered)
				<-release // whatever the context says
			}
			return &delivery.Outcome{Accepted: b.Items, Requests: 1}, nil
		}}
	const bound = 300 * time.Millisecond
	m := metrics.New(prometheus.NewRegistry())
	e, err := New(pool, locker, &Config{Schema: ts.Name, Installation: inst, AbandonAfter: bound, Metrics: m,
		HotLinger: 50 * time.Millisecond, ColdLinger: 100 * time.Millisecond, Sources: []Source{Resources(stuck)}})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g`)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- e.supervised(ctx, jobs.Resources, 0) }()
	<-entered

	// The reload: a new destination, and the job of its source stopped.
	fresh := &scripted{t: t, pool: pool, busy: map[string]bool{}, sent: map[string][]int64{}, limit: 1}
	changed, err := e.Swap([]Source{Resources(fresh)})
	require.NoError(t, err)
	require.Equal(t, []string{jobs.Resources}, changed)
	start := time.Now()
	require.Equal(t, []string{jobs.Resources}, e.Stop(ctx, changed))
	require.Less(t, time.Since(start), bound+time.Second, "Stop waits its bound, no more")
	select {
	case err := <-done:
		var snooze *river.JobSnoozeError
		require.ErrorAs(t, err, &snooze, "River's slot is freed; the job runs again")
	case <-time.After(time.Second):
		t.Fatal("the abandoned job's Work did not return")
	}
	require.Zero(t, e.lingerSlots.used, "its linger slot is back")
	require.Equal(t, 1.0, testutil.ToFloat64(m.Config.JobsAbandoned), "the abandoned job is counted")

	// The job's next run takes the lock at once and resends the batch.
	err = e.supervised(ctx, jobs.Resources, 0)
	if err != nil {
		var snooze *river.JobSnoozeError
		require.ErrorAs(t, err, &snooze)
	}
	calls, _, _, _ := fresh.snapshot()
	require.NotEmpty(t, calls)
	first, _, _, _ := stuck.snapshot()
	require.Equal(t, first[0].Key, calls[0].Key, "the abandoned batch goes again under its key")
	var pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM resources WHERE synced_at IS NULL`).Scan(&pending))
	require.Zero(t, pending)

	// The abandoned goroutine returns and sends nothing more.
	close(release)
	time.Sleep(200 * time.Millisecond)
	again, _, _, _ := stuck.snapshot()
	require.Len(t, again, 1)
}

// A reload stops the jobs of the sources it names, and only those.
func TestRunningJobsOfTheSourcesNamed(t *testing.T) {
	t.Parallel()
	var r runningJobs
	a, b, c := &job{source: "a"}, &job{source: "b"}, &job{source: "a"}
	r.add(a)
	r.add(b)
	r.add(c)
	r.remove(c)
	require.Equal(t, []*job{a}, r.of(map[string]bool{"a": true}))
	require.Empty(t, r.of(map[string]bool{"z": true}))
}
