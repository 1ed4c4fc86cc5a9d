package status_test

import (
	"context"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/status"
)

func TestGatherReadsThePushPathFacts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool

	r, err := status.Gather(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, "closed", r.Breaker.State)
	require.Nil(t, r.Pause)
	require.Nil(t, r.LastError)

	store, err := breakerstore.New(pool, nil)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, store.SetBreaker(ctx, breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: now.Add(time.Minute)}))
	require.NoError(t, store.SetPause(ctx, breakerstore.Pause{Until: now.Add(time.Minute), Cause: "429 Retry-After: 60", Status: 429}))
	require.NoError(t, store.SetRate(ctx, breakerstore.Rate{Limit: 18, Ceiling: 20}))
	require.NoError(t, store.SetLastError(ctx, breakerstore.LastError{Text: "503 Service Unavailable", Status: 503}))
	_, err = store.SetRefusal(ctx, breakerstore.KeyConfiguration, breakerstore.Refusal{Refused: true, Status: 404, Message: "404 Not Found"})
	require.NoError(t, err)

	r, err = status.Gather(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, "open", r.Breaker.State)
	require.NotNil(t, r.Pause)
	require.Equal(t, "429 Retry-After: 60", r.Pause.Cause)
	require.NotNil(t, r.Rate)
	require.InDelta(t, 18, r.Rate.Limit, 0.001)
	require.NotNil(t, r.LastError)
	require.Equal(t, 503, r.LastError.Status)
	require.True(t, r.Configuration.Refused)
	require.Equal(t, "404 Not Found", r.Configuration.Message)
}

// A destination held by syncer itself (a request program failing on every
// row) is not said to refuse its URL: no answer did.
func TestStoppedByAProgram(t *testing.T) {
	t.Parallel()
	d := &status.Destination{Name: "crm", Configuration: breakerstore.Refusal{Refused: true,
		Message: "delivery: the request program fails on every row: request.body: ran past its bound of 1s (program_timeout)"}}
	require.Equal(t, "destination crm held for its configuration, no row failed: delivery: the request program fails on every row: request.body: ran past its bound of 1s (program_timeout)", d.Stopped())
	d.Configuration.Status = 404
	require.Contains(t, d.Stopped(), "refuses the URL")
}

// Resources is one entry of the sources, read as every source is: its
// counts, its destination among the destinations, its lock holder; the
// contract's totals are the sums of the entries, and the top-level lock is
// resources' entry's.
func TestResourcesIsOneSourceAmongTheSources(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ts := dbtest.NewMigrated(t)
	pool := ts.Pool

	_, err := pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE resources SET synced_at = now() WHERE id <= 2`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE resources SET failed_at = now(), sync_error = '422 no' WHERE id = 3`)
	require.NoError(t, err)

	r, err := status.Gather(ctx, pool, nil)
	require.NoError(t, err)
	require.True(t, r.ResourcesExported)
	require.Len(t, r.Sources, 1)
	res := r.Sources[0]
	require.Equal(t, status.ResourcesSource, res.Name)
	require.Equal(t, status.DefaultDestination, res.Destination)
	require.Equal(t, []int64{5, 2, 2, 1}, []int64{res.Total, res.Synced, res.Pending, res.Failed})
	require.False(t, res.Lock.Held)
	require.Equal(t, []int64{5, 2, 3, 2, 1}, []int64{r.Total, r.Synced, r.Unsynced, r.Pending, r.Failed}, "the totals are the entries' sums")
	require.InDelta(t, res.OldestPendingAgeSeconds, r.OldestUnsyncedAgeSeconds, 0)
	require.Len(t, r.Destinations, 1)
	require.Equal(t, status.DefaultDestination, r.Destinations[0].Name)
	require.Equal(t, []string{status.ResourcesSource}, r.Destinations[0].Sources)

	// A session holding resources' export lock, as a daemon holds it.
	holder, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(holder.Release)
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, locks.ExportKey(ts.Name, jobs.Resources))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = holder.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`) })
	r, err = status.Gather(ctx, pool, nil)
	require.NoError(t, err)
	require.True(t, r.Sources[0].Lock.Held)
	require.Positive(t, r.Sources[0].Lock.PID)
	require.Equal(t, r.Sources[0].Lock, r.Lock, "the top-level lock is resources' entry's")
}
