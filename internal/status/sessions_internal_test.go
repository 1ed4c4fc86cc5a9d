package status

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/presence"
)

// Status shows what each syncer daemon of its schema holds: its sessions
// and advisory locks, told apart by their application_name; a process
// that is not a daemon of the schema (another schema's, in the same
// database, or a command's) is left out.
func TestReadSessionsCountsEachProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := dbtest.NewMigrated(t)
	other := dbtest.NewMigrated(t)
	u, err := url.Parse(ts.DSN)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", database.ApplicationName("syncer run"))
	// pgx reads a query's "+" as itself, not a space.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	pool, err := database.Open(ctx, u.String(), "syncer run")
	require.NoError(t, err)
	defer pool.Close()
	c1, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c1.Release()
	c2, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c2.Release()
	_, err = c1.Exec(ctx, "SELECT pg_advisory_lock(58), pg_advisory_lock(59)")
	require.NoError(t, err)
	defer func() { _, _ = c1.Exec(ctx, "SELECT pg_advisory_unlock_all()") }()

	// Not yet a daemon of the schema: a daemon of another schema, or a
	// command, is none of this status's.
	require.NoError(t, presence.Say(ctx, other.Pool, presence.NewID(), map[string]int64{"crm": 1}))
	got, err := readSessions(ctx, c2, 0)
	require.NoError(t, err)
	for _, s := range got {
		require.NotEqual(t, os.Getpid(), s.Process, "another schema's daemon is left out")
	}

	require.NoError(t, presence.Say(ctx, ts.Pool, presence.NewID(), map[string]int64{"crm": 1}))
	got, err = readSessions(ctx, c2, 0)
	require.NoError(t, err)
	var mine *DaemonSessions
	for i := range got {
		if got[i].Process == os.Getpid() && got[i].Role == "syncer run" {
			mine = &got[i]
		}
	}
	require.NotNil(t, mine, "%+v", got)
	require.Equal(t, 1, mine.Sessions, "the one holding the locks; the one reading is left out")
	require.Equal(t, 0, mine.Active)
	require.Equal(t, 2, mine.Locks)

	got, err = readSessions(ctx, c2, os.Getpid())
	require.NoError(t, err)
	for _, s := range got {
		require.NotEqual(t, os.Getpid(), s.Process, "the status command's own sessions are left out")
	}
}
