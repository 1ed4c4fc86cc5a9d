package database_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

func TestMalformedURLIsTypedAndHidesThePassword(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, url string }{
		{"bad port", "postgres://user:s3cr3tpw@localhost:notaport/db"},
		{"bad option", "postgres://user:s3cr3tpw@localhost/db?sslmode=sometimes"},
		{"not a url", "host=localhost password=s3cr3tpw port=x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := database.Open(context.Background(), tt.url, "syncer test")
			require.Error(t, err)
			require.ErrorIs(t, err, database.ErrBadURL)
			var ue *database.URLError
			require.True(t, errors.As(err, &ue))
			require.True(t, ue.IsUsage())
			require.NotContains(t, err.Error(), "s3cr3tpw")
		})
	}
}

func TestOpenNamesItsSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := database.Open(ctx, dbtest.URL(), "syncer run")
	require.NoError(t, err)
	defer pool.Close()
	var name string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&name))
	role, host, pid, ok := database.ParseApplicationName(name)
	require.True(t, ok, name)
	require.Equal(t, "syncer run", role)
	require.Equal(t, os.Getpid(), pid)
	want, _ := os.Hostname()
	require.True(t, strings.HasPrefix(want, host), "%q is a prefix of %q", host, want)

	// A name the URL sets wins: tests and operators may choose their own.
	dsn, schema := dbtest.NewSchema(t)
	p2, err := database.Open(ctx, dsn, "syncer run")
	require.NoError(t, err)
	defer p2.Close()
	require.NoError(t, p2.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&name))
	require.Equal(t, schema, name)
}

func TestApplicationNameIsBoundedAndKeepsThePID(t *testing.T) {
	t.Parallel()
	name := database.ApplicationName(strings.Repeat("r", 100))
	require.LessOrEqual(t, len(name), 63)
	require.True(t, strings.HasSuffix(name, ":"+strconv.Itoa(os.Getpid())), name)
	_, _, pid, ok := database.ParseApplicationName(name)
	require.True(t, ok)
	require.Equal(t, os.Getpid(), pid)
	for _, other := range []string{"", "psql", "t_0a1b2c", "syncer-lock", "x y:z"} {
		_, _, _, ok := database.ParseApplicationName(other)
		require.False(t, ok, other)
	}
}

func TestOpenTurnsJITOffUnlessTheURLSetsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct{ url, want string }{
		{dbtest.URL(), "off"},
		{dbtest.URL() + sep(dbtest.URL()) + "jit=on", "on"},
	} {
		pool, err := database.Open(ctx, tt.url, "syncer run")
		require.NoError(t, err)
		var jit string
		require.NoError(t, pool.QueryRow(ctx, "SHOW jit").Scan(&jit))
		pool.Close()
		require.Equal(t, tt.want, jit, tt.url)
	}
}

func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

// TestStatementCachesSized: every session's pgx caches are sized for the
// statements the daemon prepares, not pgx's 512 each (two maps of 512
// entries a session were a fifth of the daemon's live heap at rest; issue
// 55), and the URL's own capacities are kept.
func TestStatementCachesSized(t *testing.T) {
	t.Parallel()
	cfg, err := database.ParseURL("postgres://user@localhost/db")
	require.NoError(t, err)
	require.Equal(t, database.StatementCacheCapacity, cfg.ConnConfig.StatementCacheCapacity)
	require.Equal(t, database.DescriptionCacheCapacity, cfg.ConnConfig.DescriptionCacheCapacity)
	require.Less(t, database.StatementCacheCapacity, 512)

	cfg, err = database.ParseURL("postgres://user@localhost/db?statement_cache_capacity=300&description_cache_capacity=0")
	require.NoError(t, err)
	require.Equal(t, 300, cfg.ConnConfig.StatementCacheCapacity)
	require.Zero(t, cfg.ConnConfig.DescriptionCacheCapacity)
}
