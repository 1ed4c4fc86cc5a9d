package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 42, point 3: a reload never stops the world. Two sources on two
// destinations; one destination's requests are held (its response program
// spins, ignoring every context, or its third party never answers). A
// reload that fixes that destination returns within a few seconds, the
// other source keeps exporting during it (its rows arrive within seconds,
// not after a shutdown timeout), the fixed destination then takes its rows
// (the held batch among them, resent), and SIGTERM afterwards ends within
// the shutdown timeout.
func TestReloadNeverStopsTheWorld(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// held is the hook destination's entry before the reload, given a
		// receiver that answers 204 and one that never answers.
		held func(ok, silent string) string
		// spins: its program spins.
		spins bool
	}{
		{"spinning response program", func(ok, _ string) string {
			// Spins whatever its context says (at most program_timeout
			// once response programs are bounded): about 14 s under the
			// race detector, well past the reload's bound, 1 s without.
			return fmt.Sprintf(`    url: %s
    format: custom
    request: {path: /rows, body: '{rows: [.items[] | .id]}'}
    response: {accepted: 'last(range(1e7)) >= 0'}
`, ok)
		}, true},
		{"third party that never answers", func(_, silent string) string {
			return fmt.Sprintf(`    url: %s
    format: custom
    request: {path: /rows, body: '{rows: [.items[] | .id]}'}
`, silent)
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.spins {
				// The abandoned program ends its spin before the
				// package's leak check.
				defer waitFor(t, 3*time.Minute, "the abandoned program's end", func() bool {
					buf := make([]byte, 1<<22)
					return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "formats/custom.one")
				})
			}
			testReloadKeepsOthersExporting(t, tt.held)
		})
	}
}

func testReloadKeepsOthersExporting(t *testing.T, held func(ok, silent string) string) {
	b := setup(t, fakethirdparty.Config{})
	crm := newDestination(t, fakethirdparty.Config{})
	var mu sync.Mutex
	hookBodies := 0
	hookSeen := make(chan struct{}, 1)
	ok := newRecvServer(t, func([]byte) {
		mu.Lock()
		hookBodies++
		mu.Unlock()
		select {
		case hookSeen <- struct{}{}:
		default:
		}
	})
	silent := newRecvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case hookSeen <- struct{}{}:
		default:
		}
		<-r.Context().Done() // never answers
	})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, total int)`)
	b.exec(t, `CREATE TABLE tickets (id bigint PRIMARY KEY, body text)`)
	text := func(hook string) string {
		return fmt.Sprintf("destinations:\n  crm:\n    url: %s\n  hook:\n%s    max_in_flight: 1\nsources:\n"+
			"  - {table: orders, key: id, destination: crm}\n  - {table: tickets, key: id, destination: hook}\n", crm.url, hook)
	}
	before := text(held(ok, silent))
	fixed := text(fmt.Sprintf("    url: %s\n    format: custom\n    request: {path: /rows, body: '{rows: [.items[] | .id]}'}\n", ok))
	path := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(path, []byte(before), 0o600))
	b.installSources(t, sourcesConfig(t, before, nil))

	logs := &dbtest.Buffer{}
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(logs, logSink(t)), &slog.HandlerOptions{Level: slog.LevelDebug}))
	const shutdownTimeout = 10 * time.Second
	pool, err := pgxpool.New(context.Background(), b.dsn)
	require.NoError(t, err)
	ready := make(chan string, 8)
	reload := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- daemon.Supervise(ctx, pool, &daemon.SuperviseConfig{
			Path:     path,
			Interval: time.Hour, // only the reload asked for below
			Reload:   reload,
			Daemon: func(src *config.Config) (*daemon.Config, error) {
				return &daemon.Config{HTTPAddr: "127.0.0.1:0", ShutdownTimeout: shutdownTimeout, Logger: logger,
					Sources: src, Ready: func(addr string) { ready <- addr }}, nil
			},
			Logger: logger,
		})
		pool.Close()
	}()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	<-ready

	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(1, 10) g`)
	b.waitSourcesDrained(t, "orders")
	// The hook's batch goes, and is held.
	b.exec(t, `INSERT INTO tickets VALUES (1, 'a'), (2, 'b')`)
	select {
	case <-hookSeen:
	case <-time.After(30 * time.Second):
		t.Fatal("the hook destination was never sent its batch")
	}
	time.Sleep(200 * time.Millisecond) // its program runs, or its request waits

	// The fixed configuration, reloaded as SIGHUP does.
	require.NoError(t, os.WriteFile(path, []byte(fixed), 0o600))
	start := time.Now()
	reload <- struct{}{}
	// Orders written during the reload arrive within seconds.
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(11, 20) g`)
	waitFor(t, 5*time.Second, "orders written during the reload arrive", func() bool {
		return len(byID(crm.fake)) == 20
	})
	var addr string
	select {
	case addr = <-ready:
	case <-time.After(8 * time.Second):
		t.Fatalf("the reload did not end within 8 s (shutdown timeout %s)", shutdownTimeout)
	}
	t.Logf("reload took %s", time.Since(start))

	// The fixed destination takes its rows: the held batch, and new ones.
	b.exec(t, `INSERT INTO tickets VALUES (3, 'c')`)
	b.waitSourcesDrained(t, "orders", "tickets")
	mu.Lock()
	require.Positive(t, hookBodies)
	mu.Unlock()
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(21, 30) g`)
	b.waitSourcesDrained(t, "orders")
	require.Len(t, byID(crm.fake), 30)
	requireOnceInOrder(t, crm.fake)
	require.Contains(t, metricsText(t, addr), "syncer_config_last_reload_successful 1")

	// SIGTERM: within the shutdown timeout, whatever was left behind.
	start = time.Now()
	cancel()
	stopped = true
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(shutdownTimeout + 2*time.Second):
		t.Fatalf("the daemon did not stop within its shutdown timeout (%s) and 2 s", shutdownTimeout)
	}
	t.Logf("stopped in %s", time.Since(start))
	if strings.Contains(logs.String(), "did not return after it was asked to stop") {
		t.Logf("a job was abandoned, as it ignored its context")
	}
}

// logSink is where testLogger's logs go: kept and shown on failure.
func logSink(t *testing.T) io.Writer {
	buf := &dbtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			t.Logf("the daemon's last %d log lines:\n%s", min(len(lines), 300), strings.Join(lines[max(len(lines)-300, 0):], "\n"))
		}
	})
	return buf
}
