package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// backendTicks samples the CPU time (clock ticks) of the server backends
// serving a daemon: the role's (PgBouncer's server sessions) and the
// direct sessions named after the daemon's pid. A backend's last sample
// stands for it once it is gone.
type backendTicks struct {
	mu    sync.Mutex
	ticks map[int]int64
}

func (c *backendTicks) sample(t *testing.T, b *txPoolerBundle, daemon int) {
	rows, err := b.pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE usename = $1 OR application_name LIKE '% %:' || $2::text`, b.role(t), strconv.Itoa(daemon))
	if err != nil {
		return
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime is the
		// 12th of them, stime the 13th.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		c.ticks[pid] = u + s
	}
}

func (c *backendTicks) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, v := range c.ticks {
		n += v
	}
	return n
}

// latencyRound runs one daemon on the pooled URL (with extra flags),
// inserts rows one a statement at perSecond for d once it is idle, and
// returns each row's time from its commit to its acceptance by the fake,
// and the CPU ticks its backends spent meanwhile.
func latencyRound(t *testing.T, b *txPoolerBundle, perSecond int, d time.Duration, extra ...string) (lat []time.Duration, ticks, idle int64) {
	t.Helper()
	ctx := context.Background()
	cmd, errOut := b.startRun(t, b.pooled, extra...)
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		require.NoError(t, cmd.Wait(), errOut.String())
		if os.Getenv("SYNCER_E2E_LATENCY") == "v" {
			t.Logf("daemon %v:\n%s", extra, errOut.String())
		}
	}()
	// Idle: its kick done, its job lingering; then idleFor idle.
	time.Sleep(2 * time.Second)
	idleFrom := &backendTicks{ticks: map[int]int64{}}
	idleFrom.sample(t, b, cmd.Process.Pid)
	time.Sleep(idleFor)
	base := &backendTicks{ticks: map[int]int64{}}
	base.sample(t, b, cmd.Process.Pid)
	idle = base.total() - idleFrom.total()
	during := &backendTicks{ticks: map[int]int64{}}
	for k, v := range base.ticks {
		during.ticks[k] = v
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			during.sample(t, b, cmd.Process.Pid)
		}
	})

	n := int(d.Seconds() * float64(perSecond))
	committed := make(map[int64]time.Time, n)
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var ins sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(perSecond))))
		sem <- struct{}{}
		ins.Go(func() {
			defer func() { <-sem }()
			var id int64
			if err := b.pool.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ('{}') RETURNING id`).Scan(&id); err != nil {
				t.Error(err)
				return
			}
			at := time.Now()
			mu.Lock()
			committed[id] = at
			mu.Unlock()
		})
	}
	ins.Wait()
	b.waitAllSynced(t, time.Minute)
	close(stop)
	wg.Wait()
	during.sample(t, b, cmd.Process.Pid)
	type row struct {
		at, lat time.Duration
	}
	var rs []row
	for _, dv := range b.fake.Deliveries() {
		if c, ok := committed[dv.ID]; ok {
			lat = append(lat, dv.At.Sub(c))
			rs = append(rs, row{c.Sub(start), dv.At.Sub(c)})
			delete(committed, dv.ID)
		}
	}
	require.Empty(t, committed, "every row delivered")
	if os.Getenv("SYNCER_E2E_LATENCY") == "v" {
		slices.SortFunc(rs, func(a, b row) int { return cmp.Compare(a.at, b.at) })
		var first []string
		var rest time.Duration
		for i, r := range rs {
			if i < 12 {
				first = append(first, fmt.Sprintf("%s:%s", r.at.Round(time.Millisecond), r.lat.Round(time.Millisecond)))
			} else if r.at > 300*time.Millisecond {
				rest = max(rest, r.lat)
			}
		}
		t.Logf("%v: first rows (commit:latency) %v; max after 300 ms %s", extra, first, rest.Round(time.Millisecond))
	}
	if os.Getenv("SYNCER_E2E_LATENCY") == "v" {
		var slow []string
		for _, l := range lat {
			if l > 500*time.Millisecond {
				slow = append(slow, l.Round(time.Millisecond).String())
			}
		}
		t.Logf("%v: %d rows over 500 ms (of %d): %v", extra, len(slow), len(lat), slow[:min(len(slow), 20)])
	}
	return lat, during.total() - base.total(), idle
}

// idleFor is how long a round measures its daemon's backends idle.
const idleFor = 5 * time.Second

func pct(lat []time.Duration, p float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// Latency and database CPU through PgBouncer in transaction mode, without
// SYNCER_DIRECT_URL (leases alone, the relay's poll) against with it (the
// locks' holder and LISTEN on the direct URL), alternated in one run: one
// daemon, rows inserted one a statement at 500 a second once it idled
// 7 s, past its job's cold linger (5 s), so its first rows wait for a new
// job (SYNCER_E2E_LATENCY=v logs their latencies). Logged, not asserted:
// the machine is shared (see docs/benchmarks.md).
func TestPgBouncerTransactionPoolingLatency(t *testing.T) {
	if os.Getenv("SYNCER_E2E_LATENCY") == "" {
		t.Skip("set SYNCER_E2E_LATENCY=1 to measure")
	}
	b := setupTxPooler(t)
	code, _, errOut := syncerCmd(t, "migrate", "--database-url", b.pooled)
	require.Equal(t, 0, code, "migrate: %s", errOut)
	const perSecond, d = 500, 5 * time.Second
	modes := []struct {
		name  string
		extra []string
	}{
		{"without a direct URL", nil},
		{"with SYNCER_DIRECT_URL", []string{"--direct-url", b.direct}},
	}
	lat := map[string][]time.Duration{}
	cpu, idle := map[string]int64{}, map[string]int64{}
	for round := range 2 {
		for i := range modes {
			m := modes[(i+round)%2]
			l, c, i := latencyRound(t, b, perSecond, d, m.extra...)
			lat[m.name] = append(lat[m.name], l...)
			cpu[m.name] += c
			idle[m.name] += i
		}
	}
	var load string
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(raw))[:3], " ")
	}
	for _, m := range modes {
		l := lat[m.name]
		t.Logf("%s: %d rows at %d/s: p50 %.1f ms, p99 %.1f ms; its backends' CPU %d ticks (%.1f µs a row), idle %.1f ms a second",
			m.name, len(l), perSecond, float64(pct(l, 0.5).Microseconds())/1000, float64(pct(l, 0.99).Microseconds())/1000,
			cpu[m.name], float64(cpu[m.name])*1e4/float64(len(l)), float64(idle[m.name])*10/(2*idleFor.Seconds()))
	}
	t.Logf("CPU ratio (without / with the direct URL): %.2f; load average %s",
		float64(cpu[modes[0].name])/float64(max(cpu[modes[1].name], 1)), load)
}
