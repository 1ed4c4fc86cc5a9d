package main

// Process-level tests: the binary is built once and driven as a user would,
// including SIGKILL and SIGTERM in the middle of a drain.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/fakethirdparty"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "syncer-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "syncer")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build syncer: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is the environment without any SYNCER_ or DATABASE_URL setting
// of the machine, so tests see only what they set.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SYNCER_") || strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "FAKE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, stdout.String(), stderr.String()}
}

func TestConfigurationErrors(t *testing.T) {
	t.Parallel()
	db := "DATABASE_URL=postgres://127.0.0.1:5432/test"
	for _, tt := range []struct {
		name  string
		env   []string
		args  []string
		code  int
		names string
	}{
		{"missing third-party URL", []string{db}, []string{"run"}, 2, "--thirdparty-url (SYNCER_THIRDPARTY_URL)"},
		{"negative batch size", []string{db, "SYNCER_THIRDPARTY_URL=http://127.0.0.1:1", "SYNCER_BATCH_SIZE=-5"}, []string{"run"}, 2, "--batch-size (SYNCER_BATCH_SIZE)"},
		{"negative batch size flag", []string{db}, []string{"run", "--thirdparty-url", "http://x", "--batch-size=-5"}, 2, "--batch-size"},
		{"unknown flag", []string{db}, []string{"run", "--bogus"}, 2, "--bogus"},
		{"unknown command", nil, []string{"frobnicate"}, 2, "frobnicate"},
		{"missing database", nil, []string{"status"}, 2, "--database-url (DATABASE_URL)"},
		{"bad duration", []string{db, "SYNCER_THIRDPARTY_URL=http://x", "SYNCER_SHUTDOWN_TIMEOUT=soon"}, []string{"run"}, 2, "shutdown-timeout"},
		{"malformed DATABASE_URL", []string{"DATABASE_URL=postgres://alice:s3cr3t-pw@127.0.0.1:abc/app"}, []string{"status"}, 2, "--database-url (DATABASE_URL) is malformed"},
		{"malformed DATABASE_URL for run", []string{"DATABASE_URL=postgres://alice:s3cr3t-pw@127.0.0.1/app?sslmode=maybe", "SYNCER_THIRDPARTY_URL=http://x"}, []string{"run"}, 2, "--database-url (DATABASE_URL) is malformed"},
		{"token twice", []string{db, "SYNCER_THIRDPARTY_URL=http://x", "SYNCER_THIRDPARTY_TOKEN=t", "SYNCER_THIRDPARTY_TOKEN_FILE=/etc/hostname"}, []string{"run"}, 2, "exclusive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tt.env, tt.args...)
			require.Equal(t, tt.code, r.code, "stderr: %s", r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			require.Len(t, lines, 1, "one line: %q", r.stderr)
			require.Contains(t, lines[0], tt.names)
			require.NotContains(t, r.stderr, "s3cr3t-pw")
		})
	}
}

func TestUnreachableDatabaseNamesHostNotPassword(t *testing.T) {
	t.Parallel()
	// Port 1 on loopback refuses at once.
	r := run(t, []string{"DATABASE_URL=postgres://alice:s3cr3t-pw@127.0.0.1:1/app", "SYNCER_THIRDPARTY_URL=http://127.0.0.1:9"}, "run")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "127.0.0.1")
	require.NotContains(t, r.stderr, "s3cr3t-pw")
	require.Len(t, strings.Split(strings.TrimSpace(r.stderr), "\n"), 1, r.stderr)
	require.NotContains(t, r.stderr, "goroutine")
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"migrate", "run", "replay", "status", "retry-failed", "fake-thirdparty", "bench", "version", "healthcheck"} {
		r := run(t, nil, c, "--help")
		require.Equal(t, 0, r.code, c)
		require.Contains(t, r.stdout, "Usage: syncer "+c)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^syncer \S+ \(commit \S+, go\S+\)\n$`, r.stdout)
}

func TestHealthcheckAgainstTheDaemon(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{})
	cmd, addr := e.daemonAt(t)
	require.Eventually(t, func() bool {
		return run(t, []string{"SYNCER_HTTP_ADDR=" + addr}, "healthcheck").code == 0
	}, 30*time.Second, 50*time.Millisecond)
	// The daemon's own metrics say which build runs.
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), "\nsyncer_build_info{")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	r := run(t, []string{"SYNCER_HTTP_ADDR=" + addr}, "healthcheck")
	require.Equal(t, 1, r.code, "no daemon, no health")
	require.Len(t, strings.Split(strings.TrimSpace(r.stderr), "\n"), 1, r.stderr)
}

type env struct {
	dsn     string
	pool    *pgxpool.Pool
	fake    *fakethirdparty.Server
	fakeURL string
}

func setup(t *testing.T, cfg fakethirdparty.Config) *env {
	t.Helper()
	ts := dbtest.NewMigrated(t)
	dsn, pool := ts.DSN, ts.Pool
	fake := fakethirdparty.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &env{dsn: dsn, pool: pool, fake: fake, fakeURL: srv.URL}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// daemon starts `syncer run` and returns it.
func (e *env) daemon(t *testing.T, extra ...string) *exec.Cmd {
	t.Helper()
	cmd, _ := e.daemonAt(t, extra...)
	return cmd
}

// daemonAt starts `syncer run` and returns it with its HTTP address.
func (e *env) daemonAt(t *testing.T, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(binary, "run", "--log-level", "warn", "--log-format", "json")
	cmd.Env = cleanEnv(append([]string{
		"DATABASE_URL=" + e.dsn,
		"SYNCER_THIRDPARTY_URL=" + e.fakeURL,
		"SYNCER_HTTP_ADDR=" + addr,
	}, extra...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("daemon stderr:\n%s", stderr.String())
		}
	})
	return cmd, addr
}

func (e *env) fill(t *testing.T, n int) {
	t.Helper()
	_, err := e.pool.Exec(context.Background(), `INSERT INTO resources (payload)
		SELECT jsonb_build_object('n', g, 'pad', repeat('x', 200)) FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
}

func (e *env) pending(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM resources WHERE synced_at IS NULL AND failed_at IS NULL`).Scan(&n))
	return n
}

func (e *env) waitDrained(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for e.pending(t) > 0 {
		require.True(t, time.Now().Before(deadline), "not drained after %s: %d pending", timeout, e.pending(t))
		time.Sleep(50 * time.Millisecond)
	}
}

// sameKeyOnly asserts every (id, version) the fake accepted more than once
// came with the same Idempotency-Key each time, and returns how many pairs
// arrived more than once.
func sameKeyOnly(t *testing.T, fake *fakethirdparty.Server) int {
	t.Helper()
	type pair struct{ id, version int64 }
	keys := map[pair]string{}
	repeats := 0
	for _, d := range fake.Deliveries() {
		p := pair{d.ID, d.Version}
		if k, ok := keys[p]; ok {
			repeats++
			require.Equal(t, k, d.Key, "(%d, %d) arrived under two keys", d.ID, d.Version)
			continue
		}
		keys[p] = d.Key
	}
	return repeats
}

func TestSIGKILLAtRandomMomentsLosesNothing(t *testing.T) {
	t.Parallel()
	// The fake takes every request as new, so a repeat shows up; latency
	// makes the drain long enough to be killed in the middle.
	e := setup(t, fakethirdparty.Config{IgnoreIdempotencyKey: true, Latency: 15 * time.Millisecond})
	const rows = 30000
	e.fill(t, rows)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range 5 {
		cmd := e.daemon(t, "SYNCER_BATCH_SIZE=100")
		// Let it reach the middle of a batch: startup takes ~100 ms.
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		t.Logf("kill %d: %d rows still pending", i+1, e.pending(t))
	}
	e.daemon(t, "SYNCER_BATCH_SIZE=100")
	e.waitDrained(t, 3*time.Minute)

	latest := e.fake.Latest()
	require.Len(t, latest, rows, "every row arrived")
	repeats := sameKeyOnly(t, e.fake)
	t.Logf("pairs that arrived twice (all under the same key): %d", repeats)
	require.LessOrEqual(t, repeats, 5*(4+2)*100, "only the batches recorded at each kill (MaxInFlight+2 at most) go again")
}

func TestSIGTERMFinishesTheBatchAndExitsZero(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{IgnoreIdempotencyKey: true, Latency: 20 * time.Millisecond})
	const rows = 20000
	e.fill(t, rows)

	cmd := e.daemon(t, "SYNCER_BATCH_SIZE=100", "SYNCER_SHUTDOWN_TIMEOUT=5s")
	deadline := time.Now().Add(30 * time.Second)
	for len(e.fake.Latest()) < 1000 {
		require.True(t, time.Now().Before(deadline), "no progress")
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	took := time.Since(start)
	require.NoError(t, err, "exit status 0")
	require.Less(t, took, 5*time.Second+2*time.Second, "exits within the shutdown timeout")
	left := e.pending(t)
	t.Logf("SIGTERM: exited 0 after %s with %d rows left", took.Round(time.Millisecond), left)
	require.Positive(t, left, "stopped mid-drain")

	e.daemon(t, "SYNCER_BATCH_SIZE=100")
	e.waitDrained(t, 2*time.Minute)
	require.Len(t, e.fake.Latest(), rows)
	require.Zero(t, sameKeyOnly(t, e.fake), "the batch in flight finished, so nothing went twice")
}

func TestStatusJSONAgainstAHandFilledDatabase(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{})
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `INSERT INTO resources (payload, synced_at, failed_at, sync_error, changed_at) VALUES
		('{"a":1}', now(), NULL, NULL, now()),
		('{"a":2}', now(), NULL, NULL, now()),
		('{"a":3}', NULL, NULL, NULL, now() - interval '90 seconds'),
		('{"a":4}', NULL, NULL, NULL, now() - interval '10 seconds'),
		('{"a":5}', NULL, now(), 'field a is not allowed', now())`)
	require.NoError(t, err)

	r := run(t, []string{"DATABASE_URL=" + e.dsn}, "status", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	for _, k := range []string{"total", "unsynced", "synced", "failed", "outbox_pending"} {
		require.IsType(t, float64(0), got[k], k)
		require.Equal(t, got[k], float64(int64(got[k].(float64))), "%s is an integer", k)
	}
	require.Equal(t, float64(5), got["total"])
	require.Equal(t, float64(3), got["unsynced"])
	require.Equal(t, float64(2), got["synced"])
	require.Equal(t, float64(1), got["failed"])
	// No daemon is alive, so the gate's lease has lapsed and the inserts
	// appended no event: the next daemon finds the rows by itself.
	require.Equal(t, float64(0), got["outbox_pending"])
	age := got["oldest_unsynced_age_seconds"].(float64)
	require.InDelta(t, 90, age, 5)

	r = run(t, []string{"DATABASE_URL=" + e.dsn}, "status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "field a is not allowed")
}

// lockHeld reads syncer_lock_held from a daemon's metrics.
func lockHeld(addr string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), "\nsyncer_lock_held 1")
}

func TestAnotherDaemonTakesOverWhenTheHolderIsKilled(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{})
	a, addrA := e.daemonAt(t)
	b, addrB := e.daemonAt(t)

	var mu sync.Mutex
	committed := map[int64]time.Time{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var id int64
			if err := e.pool.QueryRow(context.Background(), `INSERT INTO resources (payload) VALUES ('{}') RETURNING id`).Scan(&id); err != nil {
				return
			}
			mu.Lock()
			committed[id] = time.Now()
			mu.Unlock()
		}
	})

	var holder *exec.Cmd
	deadline := time.Now().Add(30 * time.Second)
	for holder == nil {
		require.True(t, time.Now().Before(deadline), "no daemon took the lock")
		switch ha, hb := lockHeld(addrA), lockHeld(addrB); {
		case ha && !hb:
			holder = a
		case hb && !ha:
			holder = b
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	killedAt := time.Now()
	require.NoError(t, holder.Process.Signal(syscall.SIGKILL))
	_ = holder.Wait()
	time.Sleep(6 * time.Second)
	close(stop)
	wg.Wait()
	e.waitDrained(t, 30*time.Second)

	received := map[int64]time.Time{}
	for _, d := range e.fake.Deliveries() {
		if _, ok := received[d.ID]; !ok {
			received[d.ID] = d.At
		}
	}
	var worst time.Duration
	for id, at := range committed {
		got, ok := received[id]
		require.True(t, ok, "row %d arrived", id)
		if at.After(killedAt.Add(-time.Second)) {
			worst = max(worst, got.Sub(at))
		}
	}
	t.Logf("holder killed: the other daemon took over; the longest a row waited across the kill was %s", worst.Round(time.Millisecond))
	require.Less(t, worst, 10*time.Second)
	require.Zero(t, e.fake.Stats().DuplicatesOtherKey)
}

func TestReplaySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{IgnoreIdempotencyKey: true, Latency: 10 * time.Millisecond})
	const rows = 20000
	e.fill(t, rows)
	first := e.daemon(t, "SYNCER_BATCH_SIZE=200")
	e.waitDrained(t, time.Minute)
	e.fake.Reset()

	r := run(t, []string{"DATABASE_URL=" + e.dsn}, "replay", "--from-id", "1", "--to-id", fmt.Sprint(rows))
	require.Equal(t, 0, r.code, r.stderr)
	deadline := time.Now().Add(time.Minute)
	for len(e.fake.Latest()) < 4000 {
		require.True(t, time.Now().Before(deadline), "replay made no progress")
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	killedAt := time.Now()

	e.daemon(t, "SYNCER_BATCH_SIZE=200")
	deadline = time.Now().Add(2 * time.Minute)
	for {
		var state string
		require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT state FROM syncer_replays WHERE id = 1`).Scan(&state))
		if state == "done" {
			break
		}
		require.True(t, time.Now().Before(deadline), "replay not done")
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(killedAt)
	t.Logf("replay finished %s after its daemon was killed", took.Round(time.Millisecond))
	require.Len(t, e.fake.Latest(), rows)
	// At most MaxInFlight + 2 batches are recorded and unmarked per job (the
	// live sync's and the replay's) at the kill; only those go twice.
	require.LessOrEqual(t, sameKeyOnly(t, e.fake), 2*(4+2)*200, "only the recorded batches went twice")
	// River rescues a dead daemon's job after 2 minutes; the relay must not
	// wait for that.
	require.Less(t, took, time.Minute)
}

func TestSIGKILLWhileRowsOfTheBatchesInFlightChange(t *testing.T) {
	t.Parallel()
	// Four requests in flight (the default), rows updated while their
	// batches are in flight, and five kills: no (id, version) may arrive
	// under two keys, the versions of an id arrive in increasing order, and
	// the last version of every row arrives.
	e := setup(t, fakethirdparty.Config{IgnoreIdempotencyKey: true, Latency: 15 * time.Millisecond})
	const rows = 20000
	e.fill(t, rows)

	ctx, stopUpdates := context.WithCancel(context.Background())
	updates := make(chan int, 1)
	go func() {
		n := 0
		defer func() { updates <- n }()
		rng := rand.New(rand.NewPCG(2, 3))
		for ctx.Err() == nil {
			lo := 1 + rng.IntN(rows-50)
			tag, err := e.pool.Exec(ctx, `UPDATE resources SET payload = payload || jsonb_build_object('u', version)
				WHERE id BETWEEN $1 AND $1 + 20`, lo)
			if err == nil {
				n += int(tag.RowsAffected())
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range 5 {
		before := len(e.fake.Deliveries())
		cmd := e.daemon(t, "SYNCER_BATCH_SIZE=100")
		// Kill it in the middle of pushing, however long it took to start.
		require.Eventually(t, func() bool { return len(e.fake.Deliveries()) > before }, time.Minute, 5*time.Millisecond)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		t.Logf("kill %d: %d rows still pending", i+1, e.pending(t))
	}
	stopUpdates()
	t.Logf("rows updated during the kills: %d", <-updates)
	e.daemon(t, "SYNCER_BATCH_SIZE=100")
	e.waitDrained(t, 3*time.Minute)

	repeats := sameKeyOnly(t, e.fake)
	t.Logf("pairs that arrived twice (all under the same key): %d", repeats)
	last := map[int64]int64{}
	for _, d := range e.fake.Deliveries() {
		require.GreaterOrEqual(t, d.Version, last[d.ID], "versions of id %d arrive in increasing order", d.ID)
		last[d.ID] = d.Version
	}
	dbRows, err := e.pool.Query(context.Background(), `SELECT id, version FROM resources`)
	require.NoError(t, err)
	versions, err := pgx.CollectRows(dbRows, func(r pgx.CollectableRow) ([2]int64, error) {
		var v [2]int64
		return v, r.Scan(&v[0], &v[1])
	})
	require.NoError(t, err)
	require.Len(t, versions, rows)
	for _, v := range versions {
		require.Equal(t, v[1], last[v[0]], "the last version of row %d arrived last", v[0])
	}
}
