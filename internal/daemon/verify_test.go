package daemon_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/verify"
	"github.com/syncer-dev/syncer/migrations"
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
	pool := dbtest.NewPool(t)
	_, err := migrations.Up(ctx, pool, nil)
	require.NoError(t, err)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	b := &bundle{pool: pool, fakeURL: srv.URL}

	_, err = pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 30) g;
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
	require.Equal(t, verify.Counts{Checked: 31, OK: 31}, *clean.Counts)
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
	pool := dbtest.NewPool(t)
	_, err := migrations.Up(ctx, pool, nil)
	require.NoError(t, err)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	b := &bundle{pool: pool, fakeURL: srv.URL}
	_, err = pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g`)
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
