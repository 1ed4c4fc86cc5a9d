package database_test

import (
	"context"
	"errors"
	"io"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

func TestDetectPooling(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode string // "" is PostgreSQL itself
		want database.Pooling
	}{
		{"", database.Direct},
		{"session", database.SessionPooling},
		{"transaction", database.TransactionPooling},
		{"statement", database.StatementPooling},
	} {
		t.Run(tt.want.String()+" "+tt.mode, func(t *testing.T) {
			t.Parallel()
			dsn, _ := dbtest.NewSchema(t)
			if tt.mode != "" {
				dsn = dbtest.StartPgBouncer(t, tt.mode).URL(t, dsn)
			}
			cc, err := pgx.ParseConfig(dsn)
			require.NoError(t, err)
			var got database.Pooling
			var reason string
			err = retryReset(t, func() (err error) {
				got, reason, err = database.DetectPooling(context.Background(), cc)
				return err
			})
			require.NoError(t, err)
			require.Equal(t, tt.want, got, reason)
		})
	}
}

// PgBouncer's stock settings refuse every startup parameter but a few:
// search_path, jit and the rest must be set once connected.
func TestOpenThroughPgBouncerInSessionMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, schema := dbtest.NewSchema(t)
	pgb := dbtest.StartPgBouncer(t, "session")
	var pool *pgxpool.Pool
	err := retryReset(t, func() (err error) {
		pool, err = database.Open(ctx, pgb.URL(t, dsn)+"&statement_timeout=7s", "syncer run")
		return err
	})
	require.NoError(t, err, pgb.Log())
	defer pool.Close()
	var got struct{ schema, jit, app, timeout, idle string }
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema(), current_setting('jit'),
		current_setting('application_name'), current_setting('statement_timeout'),
		current_setting('idle_in_transaction_session_timeout')`).
		Scan(&got.schema, &got.jit, &got.app, &got.timeout, &got.idle))
	require.Equal(t, schema, got.schema)
	require.Equal(t, "off", got.jit)
	require.Equal(t, schema, got.app)
	require.Equal(t, "7s", got.timeout)
	require.Equal(t, database.IdleInTransactionTimeoutDefault, got.idle)
	require.Equal(t, []string{"application_name"}, keys(pool.Config().ConnConfig.RuntimeParams),
		"only what PgBouncer accepts goes in the startup packet")
}

// Through PgBouncer in statement mode Open refuses with one line naming
// the fix; in transaction mode, without SYNCER_DIRECT_URL, it opens.
func TestOpenRefusesStatementPoolingOnly(t *testing.T) {
	t.Parallel()
	dsn, _ := dbtest.NewSchema(t)
	pgb := dbtest.StartPgBouncer(t, "statement")
	err := retryReset(t, func() error {
		pool, err := database.Open(context.Background(), pgb.URL(t, dsn), "syncer run")
		if err == nil {
			pool.Close()
		}
		return err
	})
	require.ErrorIs(t, err, database.ErrTransactionPooling, pgb.Log())
	var pe *database.PoolerError
	require.True(t, errors.As(err, &pe))
	require.True(t, pe.IsUsage(), "a setting of the user's: exit 2")
	require.Contains(t, err.Error(), "DATABASE_URL")
	require.Contains(t, err.Error(), "use pool_mode=transaction or pool_mode=session")
	require.NotContains(t, err.Error(), "\n")

	tpgb := dbtest.StartPgBouncer(t, "transaction")
	u, err := url.Parse(tpgb.URL(t, dsn))
	require.NoError(t, err)
	q := u.Query()
	q.Del("search_path") // a session setting: refused through a transaction pooler
	u.RawQuery = q.Encode()
	require.NoError(t, retryReset(t, func() error {
		pool, err := database.Open(context.Background(), u.String(), "syncer run")
		if err == nil {
			var one int
			err = pool.QueryRow(context.Background(), "SELECT 1").Scan(&one)
			pool.Close()
		}
		return err
	}), tpgb.Log())
}

func TestApplySettingsFailsOnARefusedSetting(t *testing.T) {
	t.Parallel()
	_, err := database.Open(context.Background(), dbtest.URL()+sep(dbtest.URL())+"no_such.setting_x=1&lock_timeout=nonsense", "syncer run")
	require.ErrorContains(t, err, "lock_timeout")
}

// retryReset runs f again, at most resetAttempts times in all, while its
// error is the network's: a connection reset, refused or cut short. Under
// the load of make test (every package at once), PgBouncer has reset a
// client it had just accepted; that says nothing of what syncer does with
// a pooler that answers, which is what these tests assert. Any other
// error, or none, is returned at once, and the last one when the attempts
// are spent.
func retryReset(t *testing.T, f func() error) error {
	t.Helper()
	var err error
	for i := range resetAttempts {
		if err = f(); err == nil || !networkError(err) {
			return err
		}
		t.Logf("attempt %d of %d: %v", i+1, resetAttempts, err)
		time.Sleep(time.Duration(i+1) * 200 * time.Millisecond)
	}
	return err
}

const resetAttempts = 3

func networkError(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
