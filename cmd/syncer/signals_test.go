package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

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
