package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/migrations"
)

// Without LISTEN (a transaction pooler, no SYNCER_DIRECT_URL) the relay
// renews the gate's lease as when listening, finds a new event by its
// poll within a few FastPolls, and relays it.
func TestRelayWithoutListenPollsTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := dbtest.NewMigrated(t)
	rc, err := river.NewClient(riverpgxv5.New(ts.Pool), &river.Config{Schema: ts.Name})
	require.NoError(t, err)
	b := &bundle{pool: ts.Pool, exp: &exported{names: []string{jobs.Resources}, held: map[string]bool{}}}
	b.relay, err = outbox.New(ts.Pool, rc, b.exp, &outbox.Config{
		Channel:  migrations.Channel(ts.Name),
		LockKey:  locks.RelayKey(ts.Name),
		NoListen: true,
	})
	require.NoError(t, err)

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.relay.Run(rctx) }()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM syncer_gate WHERE lease_until > now()`) == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return b.relay.Stats().Connected }, 10*time.Second, 10*time.Millisecond)
	before := b.relay.Stats()
	b.exec(t, `UPDATE river_job SET state = 'running' WHERE state = 'available'`) // the kick's job
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.Eventually(t, func() bool {
		return b.relay.Stats().EventsRelayed > before.EventsRelayed
	}, 10*time.Second, 5*time.Millisecond)
	require.Positive(t, b.relay.Stats().Notifications)
	require.Zero(t, b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'`,
		migrations.Channel(ts.Name)), "no session listens")
	// Counted inside the round's transaction: its delete commits after.
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM syncer_outbox`) == 0 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
