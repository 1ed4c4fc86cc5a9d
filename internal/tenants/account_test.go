package tenants_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/fakethirdparty"
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
