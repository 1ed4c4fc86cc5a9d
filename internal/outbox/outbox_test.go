package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/migrations"
)

type bundle struct {
	pool  *pgxpool.Pool
	relay *outbox.Relay
	exp   *exported
}

// exported stands for the daemon's exporter: which sources it exports,
// whose lock is held, whose job is active here (none unless a test says);
// work is asked of the tables' owners, as the exporter does, and the asks
// counted.
type exported struct {
	names  []string
	held   map[string]bool
	active map[string]bool
	asked  int
}

func (x *exported) Exported() []string     { return x.names }
func (x *exported) Wake(src string) bool   { return x.active[src] }
func (x *exported) Active(src string) bool { return x.active[src] }
func (x *exported) Held(_ context.Context, _ database.Querier, names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		if x.held[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

func (x *exported) WithWork(ctx context.Context, q database.Querier, names []string) ([]string, error) {
	x.asked++
	var out, others []string
	for _, n := range names {
		if n != jobs.Resources {
			others = append(others, n)
			continue
		}
		if ok, err := resources.AnyPending(ctx, q); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, n)
	}
	more, err := sources.WithWork(ctx, q, others)
	return append(out, more...), err
}

// setup returns a relay of a daemon that exports names (resources when
// none are given).
func setup(t *testing.T, names ...string) *bundle {
	t.Helper()
	return setupWith(t, nil, names...)
}

// setupWith is setup with the relay's Config changed by with.
func setupWith(t *testing.T, with func(*outbox.Config), names ...string) *bundle {
	t.Helper()
	ts := dbtest.NewMigrated(t)
	pool, schema := ts.Pool, ts.Name
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	if len(names) == 0 {
		names = []string{jobs.Resources}
	}
	b := &bundle{pool: pool, exp: &exported{names: names, held: map[string]bool{}}}
	cfg := &outbox.Config{
		Channel: migrations.Channel(schema),
		LockKey: locks.RelayKey(schema),
	}
	if with != nil {
		with(cfg)
	}
	b.relay, err = outbox.New(pool, rc, b.exp, cfg)
	require.NoError(t, err)
	return b
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (b *bundle) syncJobs(t *testing.T, state string) int {
	return b.sourceJobs(t, jobs.Resources, state)
}

// run marks the waiting jobs running, as a worker picking them up would.
func (b *bundle) run(t *testing.T) {
	b.exec(t, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE kind = $1 AND state = 'available'`, jobs.ExportArgs{}.Kind())
}

func TestRelayKeepsOneWaitingJobAndCountsRunningOnesRight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	// The gate is armed by default; with a relay's lease valid, inserts
	// append events.
	require.NoError(t, outbox.RenewLease(ctx, b.pool, time.Minute))
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM syncer_outbox`))
	require.NoError(t, b.relay.Notified(ctx))
	require.Equal(t, 1, b.syncJobs(t, "available"))
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_outbox`), "relayed events are deleted")

	// A waiting job covers new events.
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, b.relay.Notified(ctx))
	require.Equal(t, 1, b.syncJobs(t, "available"))

	// A running job may be ending its last pass: it does not cover them.
	b.run(t)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, b.relay.Notified(ctx))
	require.Equal(t, 1, b.syncJobs(t, "available"))
	require.Equal(t, 1, b.syncJobs(t, "running"))

	// The poll: rows pending, nobody holding the lock: the running jobs are
	// ending or dead, so a job is enqueued whatever runs.
	b.run(t)
	require.NoError(t, b.relay.Poll(ctx))
	require.Equal(t, 1, b.syncJobs(t, "available"))

	// While the lock is held the poll leaves the holder alone; the kick at
	// a start does not.
	b.run(t)
	b.exp.held[jobs.Resources] = true
	require.NoError(t, b.relay.Poll(ctx))
	require.Zero(t, b.syncJobs(t, "available"))
	require.NoError(t, b.relay.Kick(ctx))
	require.Equal(t, 1, b.syncJobs(t, "available"))

	// A waiting job of the previous release covers resources.
	b.run(t)
	b.exec(t, `INSERT INTO river_job (kind, args, state, max_attempts, queue, priority) VALUES ($1, '{}', 'available', 1, $2, 1)`,
		jobs.PreviousSyncArgs{}.Kind(), jobs.Queue)
	require.NoError(t, b.relay.Kick(ctx))
	require.Zero(t, b.syncJobs(t, "available"))
}

// A drain's job is active here and holds its lock: the relay's poll, every
// 2 s, asked the table whether it had work, a scan of the pending rows
// (the marked ones first), to learn what Held then dropped.
func TestRelayPollAsksNoTableOfASourceActiveHere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	b.exp.active = map[string]bool{jobs.Resources: true}
	b.exp.held[jobs.Resources] = true

	require.NoError(t, b.relay.Poll(ctx))
	require.Zero(t, b.exp.asked, "no table asked for work")
	require.Zero(t, b.syncJobs(t, "available"), "the active job covers its rows")

	// Its job ended: the poll asks again, and enqueues a job for the rows.
	b.exp.active = nil
	b.exp.held[jobs.Resources] = false
	require.NoError(t, b.relay.Poll(ctx))
	require.Equal(t, 1, b.exp.asked)
	require.Equal(t, 1, b.syncJobs(t, "available"))
}

func TestGateShutMeansNoEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return outbox.SetArmed(ctx, tx, false) }))
	b.exec(t, `INSERT INTO resources (payload) SELECT '{}' FROM generate_series(1, 10)`)
	b.exec(t, `UPDATE resources SET payload = '{"a": 1}'`)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_outbox`))

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return outbox.SetArmed(ctx, tx, true) }))
	require.NoError(t, outbox.RenewLease(ctx, b.pool, time.Minute))
	b.exec(t, `INSERT INTO resources (payload) SELECT '{}' FROM generate_series(1, 10)`)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_outbox`), "one event per statement")
	// syncer's own marks append nothing.
	b.exec(t, `UPDATE resources SET synced_at = now()`)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_outbox`))

	// A rolled-back insert leaves no event.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_outbox`))
}

func TestGateClosesItselfWithoutALease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	// Armed, but no relay has ever listened: writers append nothing.
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	b.exec(t, `DELETE FROM resources`)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_outbox`))

	// A lease: events, one per statement, deletes included.
	require.NoError(t, outbox.RenewLease(ctx, b.pool, time.Minute))
	b.exec(t, `INSERT INTO resources (payload) SELECT '{}' FROM generate_series(1, 100)`)
	b.exec(t, `DELETE FROM resources`)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM syncer_outbox`))

	// A renewal never shortens another daemon's lease.
	require.NoError(t, outbox.RenewLease(ctx, b.pool, time.Second))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_gate WHERE lease_until > now() + interval '30 seconds'`))

	// The daemon died: once its lease ran out, writers pay nothing again.
	b.exec(t, `UPDATE syncer_gate SET lease_until = now() - interval '1 second'`)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM syncer_outbox`))
}

func TestRelayRenewsTheLeaseAndKicksAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	// Rows written while no daemon ran left no event: the kick at start
	// enqueues a sync job all the same.
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_outbox`))
	require.NoError(t, b.relay.Kick(ctx))
	require.Equal(t, 1, b.syncJobs(t, "available"))

	// A running relay holds the lease, never for longer than its TTL, so it
	// lapses on its own once the relay stops.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.relay.Run(rctx) }()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM syncer_gate WHERE lease_until > now()`) == 1
	}, 10*time.Second, 20*time.Millisecond)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.Eventually(t, func() bool { return b.relay.Stats().Notifications > 0 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_gate WHERE lease_until <= now() + $1::interval`, outbox.LeaseTTLDefault.String()))
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  *outbox.Config
		want string
	}{
		{"nil", nil, "Channel"},
		{"no key", &outbox.Config{Channel: "c"}, "LockKey"},
		{"negative poll", &outbox.Config{Channel: "c", LockKey: 1, PollInterval: -1}, "PollInterval"},
		{"negative lease", &outbox.Config{Channel: "c", LockKey: 1, LeaseTTL: -1}, "LeaseTTL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := outbox.New(nil, nil, &exported{}, tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func (b *bundle) sourceJobs(t *testing.T, source, state string) int {
	return b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'source' = $2 AND state::text = $3`,
		jobs.ExportArgs{}.Kind(), source, state)
}

// The events of configured sources become one waiting job per source;
// events of a source this daemon does not export are left for the daemons
// that do (resources' are deleted: nothing else would); the poll enqueues
// for a source with pending changes and no waiting job.
func TestRelayOneWaitingJobPerSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, "a", "b")
	relay := b.relay
	for _, name := range []string{"a", "b"} {
		b.exec(t, `INSERT INTO syncer_sources (name, schema_name, table_name, key_column, key_kind, key_type, destination, snapshot_state)
			VALUES ($1, 'public', $1, 'id', 'integer', 'bigint', 'd', 'done')`, name)
	}

	b.exec(t, `INSERT INTO syncer_outbox (op) VALUES ('source:a'), ('source:a'), ('source:b'), ('source:c'), ('INSERT')`)
	require.NoError(t, relay.Notified(ctx))
	require.Equal(t, 1, b.sourceJobs(t, "a", "available"))
	require.Equal(t, 1, b.sourceJobs(t, "b", "available"))
	require.Zero(t, b.sourceJobs(t, "c", "available"))
	require.Zero(t, b.syncJobs(t, "available"), "resources are not exported here")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_outbox`), "only the event of a source not exported here is left")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM syncer_outbox WHERE op = 'source:c'`))

	// A waiting job covers new events.
	b.exec(t, `INSERT INTO syncer_outbox (op) VALUES ('source:a')`)
	require.NoError(t, relay.Notified(ctx))
	require.Equal(t, 1, b.sourceJobs(t, "a", "available"))

	// The poll: a's job runs, a has a pending change: a waiting job
	// follows; b has nothing pending and keeps its one waiting job.
	b.exec(t, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE args->>'source' = 'a'`)
	b.exec(t, `INSERT INTO syncer_changes (source, num, key, deleted) VALUES ('a', 1, '1', false)`)
	require.NoError(t, relay.Poll(ctx))
	require.Equal(t, 1, b.sourceJobs(t, "a", "available"))
	require.Equal(t, 1, b.sourceJobs(t, "a", "running"))
	require.Equal(t, 1, b.sourceJobs(t, "b", "available"))
	require.NoError(t, relay.Poll(ctx))
	require.Equal(t, 1, b.sourceJobs(t, "a", "available"))
}
