package verify_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/verify"
)

// TestDue: a run is due a period after the last one started, at once when
// asked for or when a daemon's run stopped half way, sooner after a
// failure, and never unasked without verify_every.
func TestDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	daily := &verify.Job{Every: 24 * time.Hour}
	never := &verify.Job{}
	for _, tt := range []struct {
		name string
		job  *verify.Job
		last *verify.Last
		want bool
	}{
		{"first run", daily, nil, true},
		{"no period, never run", never, nil, false},
		{"within the period", daily, &verify.Last{State: verify.StateFinished, StartedAt: ago(23 * time.Hour)}, false},
		{"past the period", daily, &verify.Last{State: verify.StateFinished, StartedAt: ago(24 * time.Hour)}, true},
		{"asked for", never, &verify.Last{State: verify.StateFinished, StartedAt: ago(time.Hour), RequestedAt: ago(time.Minute)}, true},
		{"asked before the last run", never, &verify.Last{State: verify.StateFinished, StartedAt: ago(time.Minute), RequestedAt: ago(time.Hour)}, false},
		{"a daemon's run interrupted", daily, &verify.Last{State: verify.StateInterrupted, By: verify.ByBackground, StartedAt: ago(time.Minute)}, true},
		{"a command's run interrupted", daily, &verify.Last{State: verify.StateInterrupted, By: verify.ByCommand, StartedAt: ago(time.Minute)}, false},
		{"failed, retried after 15 minutes", daily, &verify.Last{State: verify.StateFailed, StartedAt: ago(16 * time.Minute)}, true},
		{"failed, not yet", daily, &verify.Last{State: verify.StateFailed, StartedAt: ago(5 * time.Minute)}, false},
	} {
		require.Equal(t, tt.want, verify.Due(tt.job, tt.last, now), tt.name)
	}
}

// TestPaceSpread: lookups of a spread run go at least the spread apart,
// and each takes a turn of the shared limiter.
func TestPaceSpread(t *testing.T) {
	t.Parallel()
	turns := 0
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var slept []time.Duration
	p := verify.NewPace(0, 1).Spread(30*time.Second).Turn(func(context.Context) error { turns++; return nil }).
		WithClock(func() time.Time { return now }, func(_ context.Context, d time.Duration) error {
			slept = append(slept, d)
			now = now.Add(d)
			return nil
		})
	require.NoError(t, p.Wait(t.Context(), nil, nil))
	now = now.Add(10 * time.Second) // the lookup took 10 s
	require.NoError(t, p.Wait(t.Context(), nil, nil))
	require.NoError(t, p.Wait(t.Context(), nil, nil))
	require.Equal(t, []time.Duration{20 * time.Second, 30 * time.Second}, slept, "the first at once, then a spread from the last")
	require.Equal(t, 3, turns)
}

// TestRequestOfAnUnreadableDestinationFails: "Verify now" of a source
// whose destination cannot be read back is recorded failed, saying why,
// not left asked for.
func TestRequestOfAnUnreadableDestinationFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewMigrated(t)
	src, err := verify.NewResources(verify.Range{})
	require.NoError(t, err)
	bg, err := verify.NewBackground(db.Pool, nil, &verify.BackgroundConfig{Jobs: func(context.Context) ([]verify.Job, error) {
		return []verify.Job{{Source: src, Unreadable: "destination default (format cloudevents) cannot be read back"}}, nil
	}})
	require.NoError(t, err)
	require.NoError(t, verify.Request(ctx, db.Pool, "resources"))
	bg.Tick(ctx)
	last, err := verify.LastRuns(ctx, db.Pool)
	require.NoError(t, err)
	l := last["resources"]
	require.Equal(t, verify.StateFailed, l.State)
	require.False(t, l.Requested())
	require.Contains(t, l.Text(), "FAILED")
	require.Contains(t, l.Text(), "format cloudevents")
}
