package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/locks"
)

// TestTwoFrozenHoldersTakenOverByADaemonWithFewSlots: daemons A and B
// export sources c and d, C exports a with one worker slot, every table
// written faster than its destination takes it (so every job drains until
// its run limit). A then B are frozen (SIGSTOP) two seconds apart. C must
// move rows of c and of d within the contract's bound, the lease and 20 s
// of B's freeze. Before jobs took turns at the worker slots (slotturn.go),
// C's slot stayed with a until its run limit (30 s) and then with c for
// another: d moved about a minute after the freeze, as accounts and
// line_items in the soak's seed 911096515.
func TestTwoFrozenHoldersTakenOverByADaemonWithFewSlots(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dests := map[string]*destination{}
	cfgText := map[string]string{}
	all := "destinations:\n"
	for _, tbl := range []string{"a", "c", "d"} {
		b.exec(t, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, v int)`, tbl))
		dests[tbl] = newDestination(t, fakethirdparty.Config{Latency: 200 * time.Millisecond})
		dest := fmt.Sprintf("  %s:\n    url: %s\n    max_in_flight: 1\n", tbl, dests[tbl].url)
		src := fmt.Sprintf("  - {table: %s, key: id, destination: %s, batch_size: 10}\n", tbl, tbl)
		cfgText[tbl] = "destinations:\n" + dest + "sources:\n" + src
		all += dest
	}
	all += "sources:\n"
	for _, tbl := range []string{"a", "c", "d"} {
		all += fmt.Sprintf("  - {table: %s, key: id, destination: %s, batch_size: 10}\n", tbl, tbl)
	}
	cfgText["all"] = all
	b.installSources(t, sourcesConfig(t, all, nil))
	cfgFile := map[string]string{}
	for name, text := range cfgText {
		cfgFile[name] = filepath.Join(t.TempDir(), name+".yaml")
		require.NoError(t, os.WriteFile(cfgFile[name], []byte(text), 0o600))
	}

	// 100 rows a second to each table over 500 keys; each destination
	// takes about 50.
	ctx, stop := context.WithCancel(context.Background())
	writerDone := make(chan error, 1)
	go func() {
		defer close(writerDone)
		for i := 0; ctx.Err() == nil; i++ {
			for _, tbl := range []string{"a", "c", "d"} {
				_, err := b.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s SELECT g, $2 FROM generate_series($1::int, $1::int + 9) g
					ON CONFLICT (id) DO UPDATE SET v = excluded.v`, tbl), (i*10)%500, i)
				if err != nil && ctx.Err() == nil {
					writerDone <- err
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { stop(); <-writerDone })

	u, err := url.Parse(b.dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Del("application_name")
	u.RawQuery = q.Encode()
	runURL, schema := u.String(), q.Get("search_path")
	holds := func(pid int, src string) func() bool {
		return func() bool {
			h, held, err := locks.HolderOf(context.Background(), b.pool, locks.ExportKey(schema, src))
			require.NoError(t, err)
			return held && h.Process == pid
		}
	}
	a, aErr := b.startRun(t, runURL, "--config", cfgFile["c"])
	waitFor(t, time.Minute, "A holds c", holds(a.Process.Pid, "c"))
	bd, bErr := b.startRun(t, runURL, "--config", cfgFile["d"])
	waitFor(t, time.Minute, "B holds d", holds(bd.Process.Pid, "d"))
	c, cErr := b.startRun(t, runURL, "--config", cfgFile["all"], "--workers", "1")
	waitFor(t, time.Minute, "C exports a", func() bool { return dests["a"].fake.Stats().DistinctPairs > 50 })
	// A job runs at most MaxRun (30 s) before River may hand its source to
	// another daemon: freeze once each holds its own.
	waitFor(t, time.Minute, "A holds c, B d and C a", func() bool {
		return holds(a.Process.Pid, "c")() && holds(bd.Process.Pid, "d")() && holds(c.Process.Pid, "a")()
	})

	require.NoError(t, a.Process.Signal(syscall.SIGSTOP))
	time.Sleep(2 * time.Second)
	require.NoError(t, bd.Process.Signal(syscall.SIGSTOP))
	// A batch in flight at the freeze may still be counted: three more.
	frozenAt := time.Now()
	atC, atD := dests["c"].fake.Stats().DistinctPairs, dests["d"].fake.Stats().DistinctPairs
	var tookC, tookD time.Duration
	waitFor(t, 90*time.Second, "C moves rows of c and of d", func() bool {
		if tookC == 0 && dests["c"].fake.Stats().DistinctPairs >= atC+30 {
			tookC = time.Since(frozenAt)
		}
		if tookD == 0 && dests["d"].fake.Stats().DistinctPairs >= atD+30 {
			tookD = time.Since(frozenAt)
		}
		return tookC > 0 && tookD > 0
	})
	t.Logf("after the second freeze: c moved again in %.1fs, d in %.1fs", tookC.Seconds(), tookD.Seconds())
	bound := locks.LeaseTTLDefault + 20*time.Second
	require.Less(t, tookC, bound, "c taken over within the lease and 20 s")
	require.Less(t, tookD, bound, "d taken over within the lease and 20 s")

	require.NoError(t, a.Process.Signal(syscall.SIGCONT))
	require.NoError(t, bd.Process.Signal(syscall.SIGCONT))
	stop()
	require.NoError(t, <-writerDone)
	time.Sleep(3 * time.Second)
	for _, tbl := range []string{"a", "c", "d"} {
		st := dests[tbl].fake.Stats()
		require.Zero(t, st.DuplicatesOtherKey, "%s: no pair under two keys", tbl)
		require.Zero(t, st.OutOfOrder, tbl)
	}
	for _, p := range []*os.Process{a.Process, bd.Process, c.Process} {
		require.NoError(t, p.Signal(syscall.SIGTERM))
	}
	require.NoError(t, a.Wait(), aErr.String())
	require.NoError(t, bd.Wait(), bErr.String())
	require.NoError(t, c.Wait(), cErr.String())
}
