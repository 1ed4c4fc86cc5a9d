package presence_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/presence"
)

// Issue 43: the daemons alive that export to a destination share a tenant
// source's lanes; one whose lease ran out, or that left, is not counted.
func TestAliveCountsTheDaemonsOfADestination(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	require.NoError(t, presence.Say(ctx, pool, "a", map[string]int64{"crm": 1, "search": 1}))
	require.NoError(t, presence.Say(ctx, pool, "b", map[string]int64{"crm": 0}))
	require.NoError(t, presence.Say(ctx, pool, "c", map[string]int64{"search": 0}))
	_, err := pool.Exec(ctx, `INSERT INTO syncer_daemons VALUES ('gone', 'crm', 0, now() - interval '1 second')`)
	require.NoError(t, err)
	n, err := presence.Alive(ctx, pool, "crm")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, presence.Leave(ctx, pool, "b"))
	n, err = presence.Alive(ctx, pool, "crm")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A tenant source's lanes are shared among the daemons that export it: a
// daemon that sends to its destination without the source (its
// configuration is older) is not counted, and a source's key is no
// destination's.
func TestAliveCountsTheDaemonsOfASource(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	require.NoError(t, presence.Say(ctx, pool, "new", map[string]int64{"crm": 0, presence.SourceKey("contacts"): 0}))
	require.NoError(t, presence.Say(ctx, pool, "old", map[string]int64{"crm": 0}))
	n, err := presence.Alive(ctx, pool, presence.SourceKey("contacts"))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = presence.Alive(ctx, pool, "crm")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	missing, err := presence.Missing(ctx, pool, "crm", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"new", "old"}, missing, "a pause waits for the destination's daemons only")
}
