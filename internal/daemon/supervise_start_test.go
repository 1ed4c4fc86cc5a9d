package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

// A daemon started while PostgreSQL restarts (its supervisor starts it
// again after a SIGTERM, as the soak's seed 439617995 did) had its pool
// open, then lost the connection its build read on, and exited 1 ("key
// collation: FATAL: server conn crashed?", through a PgBouncer). The
// build is tried again: here its first read waits on a lock and its
// session is ended as a restart ends it (57P01), and the daemon starts
// once the table is free.
func TestSuperviseStartsThroughASessionEndedWhileItBuilds(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := t.Context()
	_, err := migrations.Up(ctx, pool, nil)
	require.NoError(t, err)

	locker, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer locker.Release()
	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `LOCK TABLE syncer_migrations IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	var lockerPID int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockerPID))

	srv := httptest.NewServer(fakethirdparty.New(fakethirdparty.Config{}))
	defer srv.Close()
	ready := make(chan string, 1)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- daemon.Supervise(runCtx, pool, &daemon.SuperviseConfig{
			Daemon: func(*config.Config) (*daemon.Config, error) {
				return &daemon.Config{ThirdParty: thirdparty.Config{URL: srv.URL}, HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 10 * time.Second, Logger: logger,
					Ready: func(addr string) { ready <- addr }}, nil
			},
			Logger: logger,
		})
	}()
	stopped := false
	defer func() {
		cancel()
		if !stopped {
			require.NoError(t, <-done)
		}
	}()

	// The build's read waits on the lock: end its session.
	require.Eventually(t, func() bool {
		var ended bool
		err := pool.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity
			WHERE $1::int = ANY (pg_blocking_pids(pid))`, lockerPID).Scan(&ended)
		return err == nil && ended
	}, 30*time.Second, 20*time.Millisecond, "the build's read never waited on the lock")
	require.NoError(t, tx.Rollback(ctx))

	select {
	case <-ready:
	case err := <-done:
		stopped = true
		t.Fatalf("the daemon did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not start within 30 s")
	}
}
