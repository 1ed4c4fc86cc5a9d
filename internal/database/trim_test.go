package database_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

// An idle daemon's periodic work runs one statement at a time, yet the
// pool kept all 5 connections open: pgxpool's health check hands out the
// connection unused the longest next, so none stayed unused for its idle
// close (issue 58). The trim closes all but 2 once unused for a few
// seconds.
func TestIdlePoolWithPollersKeepsTwoConnections(t *testing.T) {
	ctx, pool := filledPool(t)
	// Two pollers, as River's fetch and the presence: never two
	// statements at once, or seldom.
	stop := run(ctx, t, pool, "SELECT 1", 200*time.Millisecond, 500*time.Millisecond)
	// The trim's idle time, a trim, and a health check (5 s) or two.
	time.Sleep(database.PoolTrimIdleDefault + 7*time.Second)
	peak := int32(0)
	for range 30 {
		peak = max(peak, pool.Stat().TotalConns())
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if peak > database.PoolTrimFloorDefault {
		t.Fatalf("an idle pool with two pollers kept %d connections, want <= %d", peak, database.PoolTrimFloorDefault)
	}
}

// Under load every connection is used every few milliseconds: the trim
// closes none, so the pool opens none again.
func TestPoolUnderLoadIsNotTrimmed(t *testing.T) {
	ctx, pool := filledPool(t)
	opened := pool.Stat().NewConnsCount()
	// One worker a connection, each statement after the last.
	stop := run(ctx, t, pool, "SELECT pg_sleep(0.002)", slices.Repeat([]time.Duration{0}, database.PoolMaxConnsDefault)...)
	time.Sleep(database.PoolTrimIdleDefault + 3*time.Second)
	stop()
	if n := pool.Stat().NewConnsCount() - opened; n > 0 {
		t.Fatalf("under load the pool opened %d connections again, want 0", n)
	}
}

// filledPool opens a pool as the daemon's (database.Open, trimmed) with
// every connection open, as the start's work leaves it, closed when the
// test ends, and a context bounding the test.
func filledPool(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	pool, err := database.Open(ctx, dbtest.URL(), "trim test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	stop := run(ctx, t, pool, "SELECT pg_sleep(0.2)", slices.Repeat([]time.Duration{-1}, database.PoolMaxConnsDefault)...)
	stop()
	if n := pool.Stat().TotalConns(); n != database.PoolMaxConnsDefault {
		t.Fatalf("filled pool has %d connections, want %d", n, database.PoolMaxConnsDefault)
	}
	return ctx, pool
}

// run runs sql on pool from one goroutine for each of every: every that
// long (0: one statement after the other; less than 0: once) until the
// stop it returns is called, which waits for them.
func run(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, every ...time.Duration) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, e := range every {
		wg.Go(func() {
			for {
				if _, err := pool.Exec(ctx, sql); err != nil {
					t.Error(err)
					return
				}
				if e < 0 {
					return
				}
				select {
				case <-done:
					return
				case <-time.After(e):
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}
