package tenants_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// replayCalls records Config.Replay's calls.
type replayCalls struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (c *replayCalls) replay(_ context.Context, _ pgx.Tx, tenant string) ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return nil, c.fail
	}
	c.calls = append(c.calls, tenant)
	return []int64{int64(len(c.calls))}, nil
}

func (c *replayCalls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// Issue 54 point 16 (contract 10.1, "A new account gets everything"): a
// tenant whose url (or account column) changes gets one replay, whatever
// the number of daemons that see the change, and a daemon started after
// the change replays it too; a tenant seen for the first time, or whose
// row changed otherwise (its token), gets none; a replay that could not
// be queued is queued at the next read.
func TestTenantAccountChangeReplaysOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `ALTER TABLE connections ADD COLUMN account_no text`)
	b.exec(t, `INSERT INTO connections (account, url, token, account_no) VALUES ('acme', $1, 'tok-1', 'A1')`, b.url+"/t/acme-old")
	const query = `SELECT url, token, account_no AS account FROM connections WHERE account = $1`
	settings := &tenants.Settings{Query: query}
	one, two := &replayCalls{}, &replayCalls{}
	r1 := b.registry(t, tenants.Config{Settings: settings, Replay: one.replay})
	r2 := b.registry(t, tenants.Config{Settings: settings, Replay: two.replay})
	// A held tenant's row is read again behind its batches; Reread reads
	// what is due at once, so the read is over when read returns.
	read := func(r *tenants.Registry) {
		t.Helper()
		_, err := r.For(t.Context(), "acme")
		require.NoError(t, err)
		r.Reread(t.Context())
	}
	read(r1)
	read(r2)
	require.Zero(t, one.n()+two.n(), "first seen: no replay")

	b.exec(t, `UPDATE connections SET token = 'tok-2'`)
	b.clock.Advance(tenants.RefreshEveryDefault)
	read(r1)
	read(r2)
	require.Zero(t, one.n()+two.n(), "a new token is the same account")

	b.exec(t, `UPDATE connections SET url = $1`, b.url+"/t/acme-new")
	b.clock.Advance(tenants.RefreshEveryDefault)
	read(r1)
	read(r2)
	require.Equal(t, 1, one.n()+two.n(), "two daemons, one replay")

	// A change no running daemon saw: the next daemon's first read finds
	// it against what syncer_state holds.
	b.exec(t, `UPDATE connections SET account_no = 'A2'`)
	three := &replayCalls{}
	read(b.registry(t, tenants.Config{Settings: settings, Replay: three.replay}))
	require.Equal(t, []string{"acme"}, three.calls, "the account column changed, seen after a restart")

	// A replay that cannot be queued leaves the change to the next read.
	b.exec(t, `UPDATE connections SET url = $1`, b.url+"/t/acme-third")
	four := &replayCalls{fail: errors.New("the database went away")}
	r4 := b.registry(t, tenants.Config{Settings: settings, Replay: four.replay})
	read(r4)
	require.Zero(t, four.n())
	four.mu.Lock()
	four.fail = nil
	four.mu.Unlock()
	b.clock.Advance(tenants.RefreshEveryDefault)
	read(r4)
	require.Equal(t, 1, four.n(), "queued at the next read")

	// No Replay (replay_on_change: false, verify): nothing is kept.
	b.exec(t, `UPDATE connections SET url = $1`, b.url+"/t/acme-fourth")
	b.clock.Advance(tenants.RefreshEveryDefault)
	read(b.registry(t, tenants.Config{Settings: settings}))
	var fp []byte
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT value FROM syncer_state WHERE key = 'destination:crm/tenant:acme:account'`).Scan(&fp))
	require.NotContains(t, string(fp), "tok-", "the fingerprint holds no secret")
	require.NotContains(t, string(fp), "acme-", "nor the url itself")
}

// Reread paces itself: 10,000 idle tenants read again all at once were
// 10,000 queries every 30 s, 5.5 times the CPU of a daemon holding one
// (syncer-lab bench, tenants idle). At RereadRate rows a second (with as
// many at once), a pass stopped after a while has read no more than that.
func TestRereadIsPaced(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `CREATE SEQUENCE reads`)
	b.exec(t, `INSERT INTO connections (account, url, token) SELECT 'w' || i, $1, 'tok' FROM generate_series(1, 40) i`, b.url+"/t/w")
	// Every read of a row takes a number: the reads are counted.
	const query = `SELECT url, token FROM connections WHERE account = $1 AND nextval('reads') > 0`
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: query}, Replay: (&replayCalls{}).replay, RereadRate: 5})
	for i := 1; i <= 40; i++ {
		_, err := r.For(t.Context(), fmt.Sprintf("w%d", i))
		require.NoError(t, err)
	}
	var before int64
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT last_value FROM reads`).Scan(&before))
	b.clock.Advance(tenants.RefreshEveryDefault)

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	r.Reread(ctx)
	took := time.Since(start)
	var after int64
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT last_value FROM reads`).Scan(&after))
	most := 5 + int64(5*took.Seconds()) + 1
	t.Logf("%d of 40 rows read again in %s", after-before, took.Round(time.Millisecond))
	require.Positive(t, after-before, "some were read again")
	require.LessOrEqual(t, after-before, most, "at most the burst and the rate's share of the time it took")
}

// Reread reads its rows many a round trip (issue 54); the query failing
// for one tenant (a division by zero) ends that round trip's transaction,
// and the tenants after it are read in the next: every other tenant's
// new account is seen, and only that tenant waits.
func TestRereadManyARoundTripOneFailing(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `ALTER TABLE connections ADD COLUMN bad boolean NOT NULL DEFAULT false`)
	b.exec(t, `INSERT INTO connections (account, url, token) SELECT 'w' || i, $1 || i, 'tok' FROM generate_series(1, 60) i`, b.url+"/t/old")
	const query = `SELECT url, token, 1 / (CASE WHEN bad THEN 0 ELSE 1 END) AS oops FROM connections WHERE account = $1`
	calls := &replayCalls{}
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: query}, Replay: calls.replay, RereadRate: 1000})
	for i := 1; i <= 60; i++ {
		_, err := r.For(t.Context(), fmt.Sprintf("w%d", i))
		require.NoError(t, err)
	}
	b.exec(t, `UPDATE connections SET url = $1 || account, bad = account = 'w5'`, b.url+"/t/new")
	b.clock.Advance(tenants.RefreshEveryDefault)
	r.Reread(t.Context())
	calls.mu.Lock()
	got := slices.Clone(calls.calls)
	calls.mu.Unlock()
	require.Len(t, got, 59, "every tenant but the failing one replayed to its new account")
	require.NotContains(t, got, "w5")
	_, err := r.For(t.Context(), "w5")
	require.ErrorContains(t, err, "22012", "the failing tenant's rows wait, its query's error named")
}
