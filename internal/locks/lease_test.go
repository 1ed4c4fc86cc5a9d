package locks_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
)

// leaseSetup is setup on a migrated schema (syncer_lock_leases) with leased
// Lockers of a short TTL.
func leaseSetup(t *testing.T, ttl time.Duration) *testBundle {
	t.Helper()
	b := migratedSetup(t)
	b.locker = b.leasedLocker(t, ttl)
	return b
}

// migratedSetup is a migrated schema (syncer_lock_leases), its pool and a
// key no other test uses, for Lockers the test makes.
func migratedSetup(t *testing.T) *testBundle {
	t.Helper()
	ts := dbtest.NewMigrated(t)
	connConfig, err := pgx.ParseConfig(ts.DSN)
	require.NoError(t, err)
	return &testBundle{dsn: ts.DSN, schema: ts.Name, connConfig: connConfig, pool: ts.Pool, key: locks.Key(ts.Name, t.Name())}
}

func (b *testBundle) leasedLocker(t *testing.T, ttl time.Duration) *locks.Locker {
	t.Helper()
	locker, err := locks.New(b.connConfig, &locks.Config{CheckInterval: checkInterval, Lease: true, LeaseTTL: ttl})
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	return locker
}

// startHolder runs the hold helper in a child process connected with dsn:
// it takes b.key under a lease of ttl and prints "held", then each check.
// It returns the child with its stdout and stderr; the cleanup kills it.
func (b *testBundle) startHolder(t *testing.T, dsn string, ttl time.Duration, env ...string) (*exec.Cmd, io.Reader, *dbtest.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"=hold", envDSN+"="+dsn,
		envKey+"="+strconv.FormatInt(b.key, 10), envLeaseTTL+"="+ttl.String())
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	errOut := &dbtest.Buffer{}
	cmd.Stderr = errOut
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdout, errOut
}

func TestLeaseIsRenewedWhileHeld(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	b := leaseSetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	other := b.leasedLocker(t, ttl)

	time.Sleep(3 * ttl)
	require.NoError(t, lk.Check(), "a lease renewed every fifth of its TTL never runs out")
	_, err := other.TryAcquire(ctx, b.key)
	require.ErrorIs(t, err, locks.ErrLockBusy, "a live holder is never ended")
	live, err := locks.HeldLive(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.True(t, live)
	var pid int
	var left time.Duration
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pid, expires_at - now() FROM syncer_lock_leases WHERE key = $1`, b.key).Scan(&pid, &left))
	require.Equal(t, lk.PID(), pid)
	require.Greater(t, left, ttl/2)
}

// A lease that ran out can no longer be renewed: its holder loses the lock
// (even if nobody ended its session), and a waiter ends the session.
func TestLeaseThatRanOutIsTakenOver(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := leaseSetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	require.NoError(t, locks.CheckContext(lctx))

	_, err := b.pool.Exec(ctx, `UPDATE syncer_lock_leases SET expires_at = now() - interval '1 second' WHERE key = $1`, b.key)
	require.NoError(t, err)
	live, err := locks.HeldLive(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.False(t, live, "a holder whose lease ran out does not count")

	other := b.leasedLocker(t, ttl)
	lk2, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err, "the waiter ends the stale session and takes the lock")
	defer func() { require.NoError(t, lk2.Release(ctx)) }()
	waitDone(t, lk, 2*checkInterval+time.Second)
	require.ErrorIs(t, lk.Err(), locks.ErrLockLost)
	require.ErrorIs(t, locks.CheckContext(lctx), locks.ErrLockLost)
	require.NoError(t, lk2.Check())
}

func TestCheckContextChecksEveryLockItCameFrom(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, locks.CheckContext(ctx), "no lock, nothing to check")
	outer := b.tryAcquire(t, b.locker)
	inner, err := b.newLocker(t).TryAcquire(ctx, b.key+1)
	require.NoError(t, err)
	octx, ocancel := outer.Context(ctx)
	defer ocancel()
	ictx, icancel := inner.Context(octx)
	defer icancel()
	require.NoError(t, locks.CheckContext(ictx))
	require.NoError(t, outer.Release(ctx))
	require.ErrorIs(t, locks.CheckContext(ictx), locks.ErrReleased)
	require.NoError(t, inner.Release(ctx))
}

// A holder frozen with SIGSTOP loses its lock to a waiter about one TTL
// after it froze, and when it wakes its first check fails: no check passes
// after the freeze, whatever its goroutines had not seen yet.
func TestLeaseFrozenHolder(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := leaseSetup(t, ttl)
	lk := b.frozenHolderLoses(t, ttl, b.leasedLocker(t, ttl))
	require.NoError(t, lk.Check())
}

// frozenHolderLoses runs the hold helper (with env) and, once it has held
// b.key for a few renewals, freezes it with SIGSTOP: waiter must take the
// lock over within the TTL + 3 s of the freeze. Woken, the holder must
// have passed no check after the freeze, and its last word is "lost". It
// returns waiter's lock, released at the test's end.
func (b *testBundle) frozenHolderLoses(t *testing.T, ttl time.Duration, waiter *locks.Locker, env ...string) *locks.Lock {
	t.Helper()
	ctx := context.Background()
	cmd, stdout, errOut := b.startHolder(t, b.dsn, ttl, env...)
	lines := make(chan string, 1<<16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		require.True(t, strings.HasPrefix(l, "held "), l)
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not take the lock:\n%s", errOut.String())
	}
	time.Sleep(ttl) // a few renewals

	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	// kill(2) returns before the process is stopped: it may run on a
	// little, and check, until then.
	waitStopped(t, cmd.Process.Pid)
	frozenAt := time.Now()
	var lk *locks.Lock
	var err error
	require.Eventually(t, func() bool {
		lk, err = waiter.TryAcquire(ctx, b.key)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	took := time.Since(frozenAt)
	t.Logf("took over %.1fs after the freeze (lease TTL %s)", took.Seconds(), ttl)
	require.Less(t, took, ttl+3*time.Second)
	t.Cleanup(func() { require.NoError(t, lk.Release(ctx)) })

	time.Sleep(time.Second)
	wokeAt := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	require.NoError(t, cmd.Wait(), errOut.String())
	var oks int
	last := ""
	for l := range lines {
		last = l
		if n, ok := strings.CutPrefix(l, "ok "); ok {
			ns, err := strconv.ParseInt(n, 10, 64)
			require.NoError(t, err)
			require.True(t, time.Unix(0, ns).Before(frozenAt), "a check passed after the freeze, at %s (woke %s)", time.Unix(0, ns), wokeAt)
			oks++
		}
	}
	require.Equal(t, "lost", last)
	require.Positive(t, oks)
	return lk
}

// Ending a stale holder's session takes the holder's own role (a role may
// end its own sessions) or pg_signal_backend: a daemon of another role says
// so once, loudly, and counts the lock as busy.
func TestLeaseTakeoverNeedsTheHoldersRole(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	b := leaseSetup(t, ttl)
	ctx := context.Background()
	role := func(name string) string {
		name = b.schema + "_" + name
		q := pgx.Identifier{name}.Sanitize()
		_, err := b.pool.Exec(ctx, `CREATE ROLE `+q+` LOGIN;
			GRANT USAGE ON SCHEMA `+pgx.Identifier{b.schema}.Sanitize()+` TO `+q+`;
			GRANT SELECT, INSERT, UPDATE ON syncer_lock_leases TO `+q)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = b.pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, name)
			_, _ = b.pool.Exec(context.Background(), `DROP OWNED BY `+q+`; DROP ROLE `+q)
		})
		return name
	}
	daemonRole, otherRole := role("daemon"), role("other")
	as := func(user string) *pgx.ConnConfig {
		cc := b.connConfig.Copy()
		cc.User = user
		return cc
	}

	// The holder, frozen: its lease runs out.
	holderDSN := strings.Replace(b.dsn, "://", "://"+daemonRole+"@", 1)
	cmd, stdout, errOut := b.startHolder(t, holderDSN, ttl)
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), errOut.String())
	require.True(t, strings.HasPrefix(sc.Text(), "held "), sc.Text())
	go func() {
		for sc.Scan() {
		}
	}()
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	waitStopped(t, cmd.Process.Pid)
	time.Sleep(ttl + 200*time.Millisecond)
	live, err := locks.HeldLive(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.False(t, live)

	logs := &dbtest.Buffer{}
	other, err := locks.New(as(otherRole), &locks.Config{Lease: true, LeaseTTL: ttl, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	defer other.Close()
	for range 3 {
		_, err = other.TryAcquire(ctx, b.key)
		require.ErrorIs(t, err, locks.ErrLockBusy, "another role may not end the holder's session")
	}
	require.Equal(t, 1, strings.Count(logs.String(), "may not end its session"), "said once:\n%s", logs.String())

	same, err := locks.New(as(daemonRole), &locks.Config{Lease: true, LeaseTTL: ttl})
	require.NoError(t, err)
	defer same.Close()
	lk, err := same.TryAcquire(ctx, b.key)
	require.NoError(t, err, "the holder's role ends its own session")
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
}

// A lock session holds its lock idle, sometimes in a transaction: its own
// settings win over those its connection config already makes (a pool's
// idle_in_transaction_session_timeout).
func TestLockSessionSettingsWinOverThePools(t *testing.T) {
	t.Parallel()
	dsn, _ := dbtest.NewSchema(t)
	cc, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	database.ApplySettings(cc, map[string]string{"idle_in_transaction_session_timeout": "10s", "tcp_keepalives_idle": "99"})
	locker, err := locks.New(cc, nil)
	require.NoError(t, err)
	defer locker.Close()
	ctx := context.Background()
	lk, err := locker.TryAcquire(ctx, locks.Key(dsn, t.Name()))
	require.NoError(t, err)
	defer func() { require.NoError(t, lk.Release(ctx)) }()
	got, err := locks.HolderSettings(locker, "idle_in_transaction_session_timeout", "tcp_keepalives_idle")
	require.NoError(t, err)
	require.Equal(t, "0", got["idle_in_transaction_session_timeout"])
	require.Equal(t, "10", got["tcp_keepalives_idle"])
	require.Empty(t, cc.RuntimeParams["idle_in_transaction_session_timeout"], "nothing a pooler refuses in the startup packet")
}

// waitStopped waits until every thread of process pid is stopped by a
// signal (state T in /proc/PID/task/TID/stat).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	require.Eventually(t, func() bool {
		tasks, err := os.ReadDir(dir)
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, task := range tasks {
			stat, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
			if err != nil {
				return false
			}
			// tid (comm) state ...: comm may hold spaces, never ") ".
			_, rest, ok := strings.Cut(string(stat), ") ")
			if !ok || !strings.HasPrefix(rest, "T") {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
}
