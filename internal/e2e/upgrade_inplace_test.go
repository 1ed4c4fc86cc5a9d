package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
)

// issue46Release is the tree issue 46 was written against: two replay
// models, resources special above the pipeline, and the metric families
// (syncer_unsynced_rows, syncer_lock_held beside syncer_source_*) that
// dashboards built on it query.
const issue46Release = "3cfe467"

// inplace is one upgrade in place: the database, the previous release's
// fake third parties (real processes: the fake of the release under test
// may live in another binary), and the logs of every process.
type inplace struct {
	dsn     string
	pool    *pgxpool.Pool
	cfgPath string
	res     *oldFake // resources' destination (--thirdparty-url)
	crm     *oldFake // the orders source's destination
	logMu   sync.Mutex
	logs    bytes.Buffer
}

func (u *inplace) logWriter(name string) io.Writer {
	return logFunc(func(p []byte) (int, error) {
		u.logMu.Lock()
		defer u.logMu.Unlock()
		for _, line := range bytes.SplitAfter(p, []byte("\n")) {
			if len(line) > 0 {
				fmt.Fprintf(&u.logs, "%s: %s", name, line)
			}
		}
		return len(p), nil
	})
}

// oldFake is `syncer fake-thirdparty` of the previous release, as a
// process. Its GET /v1/stats is the outside judge of what arrived.
type oldFake struct {
	url string
}

// fakeCounts are the fields of GET /v1/stats the test judges by.
type fakeCounts struct {
	ItemsAccepted      int64 `json:"items_accepted"`
	DistinctPairs      int64 `json:"distinct_pairs"`
	DuplicatesOtherKey int64 `json:"duplicates_other_key"`
	KeyConflicts       int64 `json:"key_conflicts"`
	KeyBodyConflicts   int64 `json:"key_body_conflicts"`
	KeyReplays         int64 `json:"key_replays"`
	OutOfOrder         int64 `json:"out_of_order"`
	OverlappingIDs     int64 `json:"overlapping_ids"`
}

func (u *inplace) startFake(t *testing.T, bin, name string, args ...string) *oldFake {
	t.Helper()
	addr := freePort(t)
	cmd := exec.Command(bin, append([]string{"fake-thirdparty", "--addr", addr, "--seed", "1"}, args...)...)
	cmd.Stdout, cmd.Stderr = u.logWriter(name), u.logWriter(name)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	f := &oldFake{url: "http://" + addr}
	waitFor(t, 10*time.Second, name+" serving", func() bool {
		_, err := f.get()
		return err == nil
	})
	return f
}

func (f *oldFake) get() (fakeCounts, error) {
	var c fakeCounts
	resp, err := http.Get(f.url + "/v1/stats")
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("GET /v1/stats: %s", resp.Status)
	}
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

func (f *oldFake) stats(t *testing.T) fakeCounts {
	t.Helper()
	c, err := f.get()
	require.NoError(t, err)
	return c
}

// reset forgets everything the fake received: what follows is judged alone.
func (f *oldFake) reset(t *testing.T) {
	t.Helper()
	resp, err := http.Post(f.url+"/v1/admin/reset", "", nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "POST /v1/admin/reset")
}

// command runs bin to completion against the run's database and config.
func (u *inplace) command(t *testing.T, bin string, args ...string) string {
	t.Helper()
	args = append(args, "--database-url", u.dsn, "--config", u.cfgPath, "--log-level", "error")
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", filepath.Base(bin), args, out)
	return string(out)
}

// daemon starts `bin run` as its own process and returns it with the
// address of its /metrics.
func (u *inplace) daemon(t *testing.T, bin, name string, batchSize int) (*exec.Cmd, string) {
	t.Helper()
	addr := freePort(t)
	cmd := exec.Command(bin, "run", "--database-url", u.dsn, "--config", u.cfgPath,
		"--thirdparty-url", u.res.url, "--batch-size", fmt.Sprint(batchSize), "--http-addr", addr,
		"--shutdown-timeout", "10s", "--log-level", "info")
	cmd.Stdout, cmd.Stderr = io.Discard, u.logWriter(name)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, "http://" + addr + "/metrics"
}

// term sends SIGTERM and waits for the daemon to exit on its own.
func term(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "the daemon's exit on SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit within 30s of SIGTERM")
	}
}

func (u *inplace) scalar(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, u.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (u *inplace) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := u.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// scrape returns the names of the series /metrics serves with a sample
// (a histogram's _bucket, _sum and _count each by name), nil when it does
// not answer.
func scrape(url string) map[string]bool {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

var metricNameRe = regexp.MustCompile(`\bsyncer_[a-z0-9_]*[a-z0-9]`)

// deployMetrics returns the syncer_ names the dashboards and alerts of a
// deploy/ directory query.
func deployMetrics(t *testing.T, deploy string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, pattern := range []string{"grafana/*.json", "prometheus/*.yml", "prometheus/*.yaml"} {
		files, err := filepath.Glob(filepath.Join(deploy, pattern))
		require.NoError(t, err)
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, n := range metricNameRe.FindAll(b, -1) {
				names[string(n)] = true
			}
		}
	}
	require.NotEmpty(t, names, "no metric named in %s's dashboards and alerts", deploy)
	return names
}

// Issue 46, upgrade in place from the tree it was written against: a
// database worked by that release, left with rows and keys pending and
// two replays running (one of resources, one of a configured source) by a
// daemon stopped with SIGTERM mid-drain while its metrics were scraped, is
// migrated by this release and drained by this release's daemon. Judged
// from outside only (the fake's GET /v1/stats, the resources table, the
// scrape), so that the replay model and the metric families may change
// underneath: nothing is lost, no item is accepted under two idempotency
// keys, and every metric the dashboards and alerts in deploy/ (the old
// release's and this one's) query that the old daemon served is served
// still.
func TestUpgradeInPlaceFromIssue46Release(t *testing.T) {
	t.Parallel()
	old := releaseBinary(t, issue46Release)
	newBin := syncerBinary(t)
	ctx := context.Background()

	dsn, _ := dbtest.NewSchema(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	u := &inplace{dsn: dsn, pool: pool}
	t.Cleanup(func() {
		if t.Failed() {
			u.logMu.Lock()
			t.Logf("processes' logs:\n%s", u.logs.String())
			u.logMu.Unlock()
		}
	})
	// Slow enough that a drain is still under way when it is stopped.
	u.res = u.startFake(t, old.bin, "fake-resources", "--latency", "100ms")
	u.crm = u.startFake(t, old.bin, "fake-crm", "--latency", "100ms")
	u.cfgPath = filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(u.cfgPath, fmt.Appendf(nil,
		"destinations:\n  crm:\n    url: %s\nsources:\n  - table: orders\n    key: id\n    columns: [status, total]\n    destination: crm\n",
		u.crm.url), 0o600))

	// 1. The old release installs and exports a first lot, in large
	// batches: the rows the replays send again.
	const rows, orders = 1000, 500
	u.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, total int NOT NULL)`)
	u.command(t, old.bin, "migrate")
	u.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1::int) g`, rows)
	u.exec(t, `INSERT INTO orders SELECT g, 'new', g FROM generate_series(1, $1::int) g`, orders)
	first, _ := u.daemon(t, old.bin, "old-1", 100)
	waitFor(t, time.Minute, "the old release's first export", func() bool {
		return u.res.stats(t).DistinctPairs == rows && u.crm.stats(t).DistinctPairs == orders &&
			u.scalar(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL`) == 0
	})
	term(t, first)
	// From here on every acceptance counts: each item below is to arrive
	// exactly once, under one key, whichever release sends it.
	u.res.reset(t)
	u.crm.reset(t)

	// 2. Work for the upgrade: pending rows and keys, a replay of each
	// kind, a daemon of the old release draining them in small batches
	// while its metrics are scraped, stopped with SIGTERM mid-drain.
	const pendingRows, pendingOrders = 2000, 1000
	u.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1::int) g`, pendingRows)
	u.exec(t, `INSERT INTO orders SELECT g, 'new', g FROM generate_series($1::int + 1, $1::int + $2::int) g`, orders, pendingOrders)
	u.command(t, old.bin, "replay", "--from-id", "1", "--to-id", fmt.Sprint(rows))
	u.command(t, old.bin, "replay", "--source", "orders", "--from-key", "1", "--to-key", fmt.Sprint(orders))
	second, oldMetrics := u.daemon(t, old.bin, "old-2", 10)
	oldServed := map[string]bool{}
	waitFor(t, time.Minute, "the old release mid-drain, both replays running", func() bool {
		maps.Copy(oldServed, scrape(oldMetrics))
		return u.res.stats(t).ItemsAccepted >= 300 && u.crm.stats(t).ItemsAccepted >= 100 &&
			oldServed["syncer_unsynced_rows"] && oldServed["syncer_source_pending"] &&
			u.scalar(t, `SELECT count(*) FROM syncer_replays WHERE state = 'running'`) > 0
	})
	maps.Copy(oldServed, scrape(oldMetrics))
	term(t, second)
	// What the old release left, read with its own schema: the proof that
	// the upgrade starts mid-drain.
	leftRows := u.scalar(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL`)
	leftReplays := u.scalar(t, `SELECT count(*) FROM syncer_replays WHERE state IN ('pending', 'running')`)
	leftResourcesReplays := u.scalar(t, `SELECT count(*) FROM syncer_replays WHERE state IN ('pending', 'running') AND source IS NULL`)
	leftKeys := u.scalar(t, `SELECT count(DISTINCT key) FROM syncer_changes`)
	// That release's source replay logs its keys as changes and is done
	// once they are logged: its replay is under way while they are pending.
	leftReplayedKeys := u.scalar(t, `SELECT count(DISTINCT key) FROM syncer_changes WHERE key::bigint <= $1`, orders)
	t.Logf("left by the old release at SIGTERM: %d rows pending, %d source keys pending (%d of them replayed), %d replays unfinished (%d of resources); accepted so far: resources %+v, crm %+v",
		leftRows, leftKeys, leftReplayedKeys, leftReplays, leftResourcesReplays, u.res.stats(t), u.crm.stats(t))
	require.Positive(t, leftRows, "rows pending at the upgrade")
	require.Positive(t, leftKeys, "source keys pending at the upgrade")
	require.Positive(t, leftResourcesReplays, "a replay of resources running at the upgrade")
	require.True(t, leftReplayedKeys > 0 || leftReplays > leftResourcesReplays, "the source's replay under way at the upgrade")

	// 3. This release migrates and drains.
	t.Logf("this release's migrate: %s", strings.TrimSpace(u.command(t, newBin, "migrate")))
	_, newMetrics := u.daemon(t, newBin, "new", 10)
	// Every resources row once (the pending ones and the replayed ones, at
	// their only version), every order key at least once (replayed keys at
	// the version their replay read).
	wantRows, wantOrders := int64(pendingRows+rows), int64(pendingOrders+orders)
	waitFor(t, 75*time.Second, "everything delivered by this release", func() bool {
		return u.res.stats(t).DistinctPairs >= wantRows && u.crm.stats(t).DistinctPairs >= wantOrders &&
			u.scalar(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL`) == 0
	})

	// 0 lost, 0 under two keys.
	rst, ost := u.res.stats(t), u.crm.stats(t)
	t.Logf("upgrade from %s: resources %+v; crm %+v", issue46Release, rst, ost)
	require.Equal(t, wantRows, rst.DistinctPairs, "resources: every pending and replayed row once, nothing else")
	require.Equal(t, wantOrders, ost.DistinctPairs, "orders: every pending and replayed key once, nothing else")
	require.Zero(t, u.scalar(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL`), "resources rows left unsynced")
	for name, st := range map[string]fakeCounts{"resources": rst, "crm": ost} {
		require.Zero(t, st.DuplicatesOtherKey, "%s: an item accepted under two idempotency keys", name)
		require.Zero(t, st.KeyConflicts, "%s: a key reused for other items", name)
		require.Zero(t, st.KeyBodyConflicts, "%s: a key with two bodies", name)
		require.Zero(t, st.OutOfOrder, "%s: versions out of order", name)
	}

	// The dashboards keep showing data: what deploy/ (the old release's,
	// as its users installed it, and this one's) queries and the old
	// daemon served, this release serves.
	queried := deployMetrics(t, filepath.Join(old.src, "deploy"))
	maps.Copy(queried, deployMetrics(t, filepath.Join("..", "..", "deploy")))
	var want []string
	for n := range queried {
		if oldServed[n] {
			want = append(want, n)
		}
	}
	slices.Sort(want)
	require.Subset(t, want, []string{"syncer_unsynced_rows", "syncer_lock_held"}, "the old names are among those checked")
	// Gauges of the database come on their own tick: give them a few.
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		served := scrape(newMetrics)
		missing = missing[:0]
		for _, n := range want {
			if !served[n] {
				missing = append(missing, n)
			}
		}
		if (served != nil && len(missing) == 0) || time.Now().After(deadline) {
			break
		}
	}
	require.Empty(t, missing, "metrics the dashboards and alerts in deploy/ query, served by the old daemon and not by this release")
	// A name that only an event serves (a job abandoned, a source left
	// unconfigured) is not judged: this run has no such event.
	served := scrape(newMetrics)
	var notJudged []string
	for n := range queried {
		if !oldServed[n] {
			notJudged = append(notJudged, fmt.Sprintf("%s (served now: %t)", n, served[n]))
		}
	}
	slices.Sort(notJudged)
	t.Logf("served before and after the upgrade: %v; queried by deploy/, not served by the old daemon in this run, not judged: %v", want, notJudged)
}

type logFunc func([]byte) (int, error)

func (f logFunc) Write(p []byte) (int, error) { return f(p) }
