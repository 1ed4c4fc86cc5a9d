package daemon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/verify"
)

// lastVerify returns resources' last verify once cond holds for it.
func lastVerify(t *testing.T, b *bundle, what string, cond func(*verify.Last) bool) *verify.Last {
	t.Helper()
	var got *verify.Last
	require.Eventually(t, func() bool {
		last, err := verify.LastRuns(t.Context(), b.pool)
		require.NoError(t, err)
		got = last["resources"]
		return got != nil && cond(got)
	}, 60*time.Second, 50*time.Millisecond, what)
	return got
}

// TestBackgroundVerifyHeals: with verify_every and verify_heal, the daemon
// verifies resources in the background; drift made at the third party
// (lost, edited, re-created rows) is found by kind, healed through the
// export, and the next run finds nothing; status shows the last run.
func TestBackgroundVerifyHeals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, fake := setupLookup(t)
	pool := b.pool

	_, err := pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 30) g;
		INSERT INTO resources (payload) VALUES ('{"gone": true}');`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM resources WHERE id = 31`)
	require.NoError(t, err)
	b.start(t, &daemon.Config{HTTPAddr: daemon.HTTPAddrOff, VerifyEvery: 2 * time.Second, VerifyHeal: true,
		VerifyTick: 100 * time.Millisecond})
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM resources WHERE synced_at IS NULL) + (SELECT count(*) FROM syncer_tombstones WHERE synced_at IS NULL)`).Scan(&n))
		return n == 0
	}, 30*time.Second, 50*time.Millisecond, "every row exported")
	synced := time.Now()
	clean := lastVerify(t, b, "a run after the export, clean", func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.StartedAt.After(synced) && l.Counts.Pending == 0
	})
	require.Equal(t, verify.Counts{KindCounts: verify.KindCounts{Checked: 31, OK: 31}}, *clean.Counts)
	require.Equal(t, verify.ByBackground, clean.By)

	fake.ApplyDrift(fakethirdparty.Drift{
		Lose:     []string{"1", "2"},
		Edit:     map[string]json.RawMessage{"3": json.RawMessage(`{"n": 300}`)},
		Recreate: map[string]json.RawMessage{"31": json.RawMessage(`{"gone": true}`)},
	})
	drifted := time.Now()
	found := lastVerify(t, b, "a run after the drift", func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.StartedAt.After(drifted)
	})
	require.Equal(t, [4]int64{2, 1, 1, 4}, [4]int64{found.Counts.Missing, found.Counts.Stale, found.Counts.Zombie, found.Counts.Healed},
		"counts %+v", *found.Counts)

	healed := lastVerify(t, b, "a clean run once the healed rows were sent", func(l *verify.Last) bool {
		return l.State == verify.StateFinished && l.FinishedAt.After(*found.FinishedAt) && l.Counts.Drifted() == 0 && l.Counts.Pending == 0
	})
	require.Equal(t, int64(31), healed.Counts.OK)

	r, err := status.Gather(ctx, pool, nil)
	require.NoError(t, err)
	var res *status.Source
	for i := range r.Sources {
		if r.Sources[i].Name == status.ResourcesSource {
			res = &r.Sources[i]
		}
	}
	require.NotNil(t, res)
	require.NotNil(t, res.Verify)
	require.NotNil(t, res.Verify.Counts)
	require.Contains(t, res.Verify.Text(), "checked")
}

// TestVerifyNow: a source whose destination has no verify_every is
// verified when someone asks (the console's "Verify now"), once.
func TestVerifyNow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, _ := setupLookup(t)
	pool := b.pool
	_, err := pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	b.start(t, &daemon.Config{HTTPAddr: daemon.HTTPAddrOff, VerifyTick: 100 * time.Millisecond})
	time.Sleep(300 * time.Millisecond)
	last, err := verify.LastRuns(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, last, "no verify_every: no run unasked")

	require.NoError(t, verify.Request(context.WithoutCancel(ctx), pool, "resources"))
	got := lastVerify(t, b, "the requested run", func(l *verify.Last) bool { return l.State == verify.StateFinished })
	require.Equal(t, verify.ByConsole, got.By)
	require.Equal(t, int64(5), got.Counts.Checked)
}

// TestVerifyAndExportShareTheRateLimit: while rows are pending, a
// daemon's verify takes at most a quarter of the destination's requests,
// and its lookups and the export's batches together stay within the
// destination's rate limit (one limiter, the deliverer's). The bounds are
// a token bucket's, which hold however slow the machine: no lower bound
// on speed is asserted.
func TestVerifyAndExportShareTheRateLimit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, fake := setupLookup(t)
	pool := b.pool

	// 25,000 rows synced (absent at the fake: missing, not healed) for
	// the verify to read, then 150 pending for the export to send one a
	// batch.
	_, err := pool.Exec(ctx, `INSERT INTO resources (payload, synced_at) SELECT jsonb_build_object('n', g), now() FROM generate_series(1, 25000) g;
		INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 150) g`)
	require.NoError(t, err)
	require.NoError(t, verify.Request(ctx, pool, "resources"))
	const limit = 40.0
	cfg := &daemon.Config{HTTPAddr: daemon.HTTPAddrOff, VerifyTick: 50 * time.Millisecond}
	cfg.Delivery.RateLimit, cfg.Delivery.RateBurst = limit, 1
	cfg.Exporter.BatchSize = 1
	b.start(t, cfg)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM resources WHERE synced_at IS NULL`).Scan(&n))
		return n == 0
	}, 60*time.Second, 50*time.Millisecond, "every row exported")

	var batches []time.Time
	for _, r := range fake.Requests() {
		batches = append(batches, r.At)
	}
	require.NotEmpty(t, batches)
	lookups := fake.Lookups()
	start, end := batches[0], batches[len(batches)-1]
	if len(lookups) > 0 && lookups[0].Before(start) {
		start = lookups[0]
	}
	var during int
	for _, at := range lookups {
		if !at.After(end) {
			during++
		}
	}
	elapsed := end.Sub(start).Seconds()
	// Arrival times trail the limiter's by a request's trip: a request or
	// two of slack.
	const slack = 3
	t.Logf("%d batches and %d lookups in %.2fs at %g/s", len(batches), during, elapsed, limit)
	require.Positive(t, during, "the verify ran while the export did")
	require.LessOrEqual(t, float64(len(batches)+during), limit*elapsed+1+slack,
		"%d batches and %d lookups in %.2fs at %g/s", len(batches), during, elapsed, limit)
	require.LessOrEqual(t, float64(during), limit*verify.PendingShare*elapsed+1+slack,
		"%d lookups in %.2fs while rows were pending", during, elapsed)
}
