package verify_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/tenant"
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

// TestPaceSpread: a spread run's lookups wait the time left over the
// lookups left (the first at once), each taking a turn of the shared
// limiter; past the estimate (rows added) they quicken a step at a time
// rather than racing, and end before the bound however many there are.
func TestPaceSpread(t *testing.T) {
	t.Parallel()
	turns := 0
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	now := start
	var slept []time.Duration
	p := verify.NewPace(0, 1).WithClock(func() time.Time { return now }, func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		now = now.Add(d)
		return nil
	}).Spread(3, time.Minute, 2*time.Minute).Turn(func(context.Context) error { turns++; return nil })
	require.NoError(t, p.Wait(t.Context(), nil, nil))
	now = now.Add(10 * time.Second) // the lookup took 10 s
	require.NoError(t, p.Wait(t.Context(), nil, nil))
	require.NoError(t, p.Wait(t.Context(), nil, nil))
	require.Equal(t, []time.Duration{20 * time.Second, 30 * time.Second}, slept, "the first at once, then the time left over the lookups left")
	require.Equal(t, start.Add(time.Minute), now, "the last expected at the aim")
	require.Equal(t, 3, turns)

	// 3 expected, 1000 made: each step of as many again as went, by halfway to the bound.
	slept = nil
	for range 997 {
		require.NoError(t, p.Wait(t.Context(), nil, nil))
	}
	require.Less(t, now.Sub(start), 2*time.Minute, "within the bound")
	require.Len(t, slept, 997, "each waited")
	require.Equal(t, 10*time.Second, slept[0], "the 4th: 30 s to the first step's end over 3")
	for i := 1; i < len(slept); i++ {
		require.GreaterOrEqual(t, slept[i], slept[i-1]/5, "no burst at the estimate's end (lookup %d)", i+4)
	}
}

// TestPaceSpreadKeepsTheDestinationsPace: a spread behind its schedule
// (or past its estimate) never sends faster than the destination's rate
// limit, nor than PendingShare of it while rows are pending.
func TestPaceSpreadKeepsTheDestinationsPace(t *testing.T) {
	t.Parallel()
	p := verify.NewPace(40, 1).Spread(1, time.Millisecond, 2*time.Millisecond)
	src := pendingSource{spreadSource{name: "orders"}}
	began := time.Now()
	for range 6 {
		require.NoError(t, p.Wait(t.Context(), nil, src))
	}
	require.InDelta(t, 40*verify.PendingShare, p.Limit(), 1e-9)
	require.GreaterOrEqual(t, time.Since(began), 450*time.Millisecond, "5 lookups after the first at 10 a second")
}

// pendingSource has rows pending.
type pendingSource struct{ spreadSource }

func (pendingSource) AnyPending(context.Context, database.Querier) (bool, error) { return true, nil }

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

// TestRequestHurriesASpreadRun: "Verify now" while the daemon's periodic
// run waits out its spread (half the period over the pages estimated,
// here 30 minutes before the second tenant's lookup) makes that run go on
// at once, so the run asked for starts within ticks, not half a period
// later (TestBackgroundVerifyTenantsHeals failed so under load: the run
// begun at the daemon's start held the source for its spread).
func TestRequestHurriesASpreadRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewMigrated(t)
	locker, err := locks.New(db.Pool.Config().ConnConfig, nil)
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	rd := &countingReader{}
	src := spreadSource{name: "orders"}
	bg, err := verify.NewBackground(db.Pool, locker, &verify.BackgroundConfig{Schema: db.Name, Tick: 50 * time.Millisecond, Jobs: func(context.Context) ([]verify.Job, error) {
		return []verify.Job{{Source: src, Tenants: spreadTenants{rd: rd}, Every: time.Hour}}, nil
	}})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); bg.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	last := func() *verify.Last {
		runs, err := verify.LastRuns(ctx, db.Pool)
		require.NoError(t, err)
		return runs["orders"]
	}
	// The periodic run, begun at once, looked up acme and waits its spread for globex.
	require.Eventually(t, func() bool { return rd.lookups.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	l := last()
	require.Equal(t, verify.StateRunning, l.State)
	require.Equal(t, verify.ByBackground, l.By)
	require.NoError(t, verify.Request(ctx, db.Pool, "orders"))
	require.Eventually(t, func() bool {
		l := last()
		return l.State == verify.StateFinished && l.By == verify.ByConsole
	}, 10*time.Second, 10*time.Millisecond, "the run asked for, after the periodic one")
	l = last()
	require.Equal(t, verify.KindCounts{Checked: 2, OK: 2}, l.Counts.KindCounts)
	require.Equal(t, int64(4), rd.lookups.Load(), "both runs looked up both tenants")
}

// spreadSource is a source of one key a tenant, whose rows the planner
// estimates at none: a periodic run spreads its lookups half an hour apart.
type spreadSource struct {
	name   string
	tenant tenant.Tenant
	// rows is what Estimate tells.
	rows int64
}

func (s spreadSource) Name() string                                              { return s.name }
func (s spreadSource) Tenant() tenant.Tenant                                     { return s.tenant }
func (s spreadSource) Estimate(context.Context, database.Querier) (int64, error) { return s.rows, nil }
func (s spreadSource) Page(_ context.Context, _ database.Querier, after string, _ int) ([]verify.Here, error) {
	if after != "" {
		return nil, nil
	}
	return []verify.Here{{ID: string(s.tenant), Payload: json.RawMessage(`{}`)}}, nil
}
func (spreadSource) Heal(context.Context, pgx.Tx, []string) (int64, error)      { return 0, nil }
func (spreadSource) AnyPending(context.Context, database.Querier) (bool, error) { return false, nil }
func (spreadSource) PendingOf(context.Context, database.Querier, []string) ([]string, error) {
	return nil, nil
}

// spreadTenants are acme and globex, each a spreadSource read by rd.
type spreadTenants struct{ rd verify.Reader }

func (spreadTenants) Page(_ context.Context, _ database.Querier, after tenant.Tenant, _ int) ([]tenant.Tenant, error) {
	if !after.IsZero() {
		return nil, nil
	}
	return []tenant.Tenant{"acme", "globex"}, nil
}

func (s spreadTenants) Tenant(_ context.Context, t tenant.Tenant) (verify.Source, verify.Reader, error) {
	return spreadSource{name: "orders", tenant: t}, s.rd, nil
}

// countingReader holds every key asked for, and counts the lookups.
type countingReader struct{ lookups atomic.Int64 }

func (r *countingReader) Lookup(_ context.Context, ids []string) (map[string]verify.There, error) {
	r.lookups.Add(1)
	out := map[string]verify.There{}
	for _, id := range ids {
		out[id] = verify.There{Payload: json.RawMessage(`{}`)}
	}
	return out, nil
}
