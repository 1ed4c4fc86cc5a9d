package presence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/presence"
)

// A pause waits for the daemons alive that serve its destination and hold
// an older generation, and for nobody else: not a daemon of another
// destination, not one whose lease ran out, not one that left. Await names
// those still missing at its bound, and returns as soon as none is.
func TestAwaitWaitsForTheDaemonsAliveOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool

	require.NoError(t, presence.Say(ctx, pool, "a", map[string]int64{"crm": 1, "search": 1}))
	require.NoError(t, presence.Say(ctx, pool, "b", map[string]int64{"crm": 2}))
	require.NoError(t, presence.Say(ctx, pool, "c", map[string]int64{"search": 0}))
	_, err := pool.Exec(ctx, `INSERT INTO syncer_daemons VALUES ('gone', 'crm', 0, now() - interval '1 second')`)
	require.NoError(t, err)

	missing, err := presence.Missing(ctx, pool, "crm", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, missing)

	start := time.Now()
	missing, err = presence.Await(ctx, pool, "crm", 2, 300*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, missing, "named at the bound")
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)

	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = presence.Say(ctx, pool, "a", map[string]int64{"crm": 2, "search": 1})
	}()
	missing, err = presence.Await(ctx, pool, "crm", 2, 5*time.Second)
	require.NoError(t, err)
	require.Empty(t, missing, "held everywhere once a says so")

	// A destination a daemon no longer has is dropped; one that left is
	// not waited for.
	require.NoError(t, presence.Say(ctx, pool, "a", map[string]int64{"search": 1}))
	require.NoError(t, presence.Leave(ctx, pool, "c"))
	missing, err = presence.Missing(ctx, pool, "search", 5)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, missing)
	missing, err = presence.Missing(ctx, pool, "crm", 3)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, missing)
}
