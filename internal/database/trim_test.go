package database_test

import (
	"context"
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := database.Open(ctx, dbtest.URL(), "trim test")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fill(ctx, t, pool)

	// Two pollers, as River's fetch and the presence: never two
	// statements at once, or seldom.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, every := range []time.Duration{200 * time.Millisecond, 500 * time.Millisecond} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	// The trim's idle time, a trim, and a health check (5 s) or two.
	time.Sleep(database.PoolTrimIdleDefault + 7*time.Second)
	peak := int32(0)
	for range 30 {
		peak = max(peak, pool.Stat().TotalConns())
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if peak > database.PoolTrimFloorDefault {
		t.Fatalf("an idle pool with two pollers kept %d connections, want <= %d", peak, database.PoolTrimFloorDefault)
	}
}

// Under load every connection is used every few milliseconds: the trim
// closes none, so the pool opens none again.
func TestPoolUnderLoadIsNotTrimmed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := database.Open(ctx, dbtest.URL(), "trim test")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fill(ctx, t, pool)
	opened := pool.Stat().NewConnsCount()

	deadline := time.Now().Add(database.PoolTrimIdleDefault + 3*time.Second)
	var wg sync.WaitGroup
	for range database.PoolMaxConnsDefault {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := pool.Exec(ctx, "SELECT pg_sleep(0.002)"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := pool.Stat().NewConnsCount() - opened; n > 0 {
		t.Fatalf("under load the pool opened %d connections again, want 0", n)
	}
}

// fill opens all the pool's connections at once.
func fill(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var wg sync.WaitGroup
	for range database.PoolMaxConnsDefault {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pool.Exec(ctx, "SELECT pg_sleep(0.2)"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := pool.Stat().TotalConns(); n != database.PoolMaxConnsDefault {
		t.Fatalf("filled pool has %d connections, want %d", n, database.PoolMaxConnsDefault)
	}
}
