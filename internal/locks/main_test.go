package locks_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/syncer-dev/syncer/internal/locks"
)

// Environment of a child process started by TestNoOverlapAcrossProcesses.
const (
	envHelper = "LOCKS_TEST_HELPER"
	envDSN    = "LOCKS_TEST_DSN"
	envKey    = "LOCKS_TEST_KEY"
	envRounds = "LOCKS_TEST_ROUNDS"
	// envLeaseTTL is the hold child's LeaseTTL.
	envLeaseTTL = "LOCKS_TEST_LEASE_TTL"
	// envLeasesOnly, not empty, makes the hold child's locks leases alone.
	envLeasesOnly = "LOCKS_TEST_LEASES_ONLY"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) == "overlap" {
		if err := runOverlapChild(); err != nil {
			fmt.Fprintln(os.Stderr, "overlap child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(envHelper) == "hold" {
		if err := runHoldChild(); err != nil {
			fmt.Fprintln(os.Stderr, "hold child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// runOverlapChild enters the critical section guarded by the lock a number of
// times. Inside, it bumps a shared counter through a separate session: if
// the counter is not 1, someone else is inside too, and it records a
// violation. The "enter" rows are written through WithTx, as sync marks are.
func runOverlapChild() error {
	key, err := strconv.ParseInt(os.Getenv(envKey), 10, 64)
	if err != nil {
		return fmt.Errorf("parse key: %w", err)
	}
	rounds, err := strconv.Atoi(os.Getenv(envRounds))
	if err != nil {
		return fmt.Errorf("parse rounds: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	connConfig, err := pgx.ParseConfig(os.Getenv(envDSN))
	if err != nil {
		return fmt.Errorf("parse dsn: %w", err)
	}
	locker, err := locks.New(connConfig, &locks.Config{CheckInterval: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	counter, err := pgx.ConnectConfig(ctx, connConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer counter.Close(context.WithoutCancel(ctx))

	pid := os.Getpid()
	for range rounds {
		var lk *locks.Lock
		for {
			lk, err = locker.TryAcquire(ctx, key)
			if err == nil {
				break
			}
			if !errors.Is(err, locks.ErrLockBusy) {
				return fmt.Errorf("try acquire: %w", err)
			}
			time.Sleep(time.Duration(1+pid%3) * time.Millisecond)
		}

		var n int
		if err := counter.QueryRow(ctx, "UPDATE inside SET n = n + 1 RETURNING n").Scan(&n); err != nil {
			return fmt.Errorf("enter: %w", err)
		}
		if n != 1 {
			if _, err := counter.Exec(ctx, "INSERT INTO violations (pid, n) VALUES ($1, $2)", pid, n); err != nil {
				return fmt.Errorf("record violation: %w", err)
			}
		}
		err := lk.WithTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO entries (pid, what) VALUES ($1, 'enter')", pid)
			return err
		})
		if err != nil {
			return fmt.Errorf("mark: %w", err)
		}
		time.Sleep(3 * time.Millisecond)
		if _, err := counter.Exec(ctx, "UPDATE inside SET n = n - 1"); err != nil {
			return fmt.Errorf("leave: %w", err)
		}
		if err := lk.Release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
	}
	return nil
}

// runHoldChild takes a leased lock (TTL envLeaseTTL), says "held PID", then
// checks the lock every few milliseconds as a sender would before each
// request, printing "ok T" for every check that passed, T the time (Unix
// nanoseconds) taken just before it, until a check fails: then it prints
// "lost" and exits 0. TestLeaseFrozenHolder stops it with SIGSTOP.
func runHoldChild() error {
	key, err := strconv.ParseInt(os.Getenv(envKey), 10, 64)
	if err != nil {
		return fmt.Errorf("parse key: %w", err)
	}
	ttl, err := time.ParseDuration(os.Getenv(envLeaseTTL))
	if err != nil {
		return fmt.Errorf("parse ttl: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connConfig, err := pgx.ParseConfig(os.Getenv(envDSN))
	if err != nil {
		return fmt.Errorf("parse dsn: %w", err)
	}
	locker, err := locks.New(connConfig, &locks.Config{Lease: true, LeaseTTL: ttl, LeasesOnly: os.Getenv(envLeasesOnly) != ""})
	if err != nil {
		return err
	}
	defer locker.Close()
	lk, err := locker.TryAcquire(ctx, key)
	if err != nil {
		return err
	}
	defer func() { _ = lk.Release(context.Background()) }()
	fmt.Printf("held %d\n", lk.PID())
	for ctx.Err() == nil {
		t := time.Now().UnixNano()
		if err := lk.Check(); err != nil {
			if !errors.Is(err, locks.ErrLockLost) {
				return fmt.Errorf("check: %w", err)
			}
			fmt.Println("lost")
			return nil
		}
		fmt.Printf("ok %d\n", t)
		time.Sleep(5 * time.Millisecond)
	}
	return ctx.Err()
}
