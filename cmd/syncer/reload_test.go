package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Issue 42, point 3, as it was met: a custom destination whose response
// program spins (`accepted: 'last(range(1e11)) >= 0'`), fixed in the file
// and reloaded with SIGHUP. resources, on another destination, keeps
// exporting during the reload; the fixed destination takes its rows, the
// held batch among them; SIGTERM then exits 0 within the shutdown timeout.
// Response programs are bounded now (program_timeout), so the spin ends by
// itself within a second; the reload must not wait on it either way.
// Before, the reload stopped every source for the whole shutdown timeout,
// and SIGTERM took as long again.
func TestSIGHUPFixingASpinningProgramStopsNothingElse(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{})
	seen := make(chan struct{}, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case seen <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `CREATE TABLE tickets (id bigint PRIMARY KEY, body text)`)
	require.NoError(t, err)
	file := func(response string) []byte {
		return fmt.Appendf(nil, `destinations:
  hook:
    url: %s
    format: custom
    request: {path: /rows, body: '{rows: [.items[] | .id]}'}
%s
sources:
  - {table: tickets, key: id, destination: hook}
`, hook.URL, response)
	}
	path := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(path, file(`    response: {accepted: 'last(range(1e11)) >= 0'}`), 0o600))
	r := run(t, []string{"DATABASE_URL=" + e.dsn}, "migrate", "--config", path)
	require.Zero(t, r.code, r.stderr)

	const shutdownTimeout = 10 * time.Second
	cmd, stderr := startDaemon(t, "info", "DATABASE_URL="+e.dsn, "SYNCER_THIRDPARTY_URL="+e.fakeURL, "SYNCER_HTTP_ADDR="+freeAddr(t),
		"SYNCER_CONFIG="+path, "SYNCER_SHUTDOWN_TIMEOUT="+shutdownTimeout.String())
	e.fill(t, 10)
	e.waitDrained(t, 30*time.Second)
	_, err = e.pool.Exec(ctx, `INSERT INTO tickets VALUES (1, 'a'), (2, 'b')`)
	require.NoError(t, err)
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the hook was never sent its batch")
	}
	time.Sleep(300 * time.Millisecond) // its answer's program spins

	require.NoError(t, os.WriteFile(path, file(""), 0o600))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	time.Sleep(500 * time.Millisecond) // the reload under way
	e.fill(t, 10)
	e.waitDrained(t, 5*time.Second) // written during the reload: within seconds

	_, err = e.pool.Exec(ctx, `INSERT INTO tickets VALUES (3, 'c')`)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := sources.Stats(ctx, e.pool)
		require.NoError(t, err)
		if len(st) == 1 && st[0].PendingKeys == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the fixed destination did not take its rows in 30 s")
		time.Sleep(50 * time.Millisecond)
	}

	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		require.NoError(t, err, "exit status 0")
	case <-time.After(shutdownTimeout + 2*time.Second):
		t.Fatalf("SIGTERM: not exited within the shutdown timeout (%s) and 2 s", shutdownTimeout)
	}
	t.Logf("SIGTERM: exited in %s", time.Since(start).Round(time.Millisecond))
	// The spin ends one of two ways, and either is said: the program's own
	// bound (program_timeout) ends it as not an answer, or, should the
	// reload come while it runs, the job that did not stop is abandoned.
	log := stderr.String()
	require.True(t, strings.Contains(log, "did not return after it was asked to stop") ||
		strings.Contains(log, "ran past its bound"), "the spinning job is said")
	require.True(t, strings.Contains(stderr.String(), `"source":"tickets"`))
}
