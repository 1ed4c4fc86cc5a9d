package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

type bundle struct {
	pool    *pgxpool.Pool
	dsn     string
	fake    *fakethirdparty.Server
	fakeURL string
}

// setup returns a migrated schema and a fake third party.
func setup(t *testing.T, fakeCfg fakethirdparty.Config) *bundle {
	t.Helper()
	ts := dbtest.NewMigrated(t)
	dsn, pool := ts.DSN, ts.Pool
	fake := fakethirdparty.New(fakeCfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &bundle{pool: pool, dsn: dsn, fake: fake, fakeURL: srv.URL}
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("SYNCER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With(slog.String("test", t.Name()))
	}
	// Kept, and shown when the test fails: a failure seen once in a
	// full run is read from its own logs, not guessed at.
	buf := &dbtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			t.Logf("the daemon's last %d log lines:\n%s", min(len(lines), 300), strings.Join(lines[max(len(lines)-300, 0):], "\n"))
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type runningDaemon struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop shuts the daemon down as SIGTERM would and returns Run's error.
func (d *runningDaemon) stop() error {
	d.once.Do(func() {
		d.cancel()
		d.err = <-d.done
	})
	return d.err
}

// startDaemon runs a daemon on its own pool until the test ends.
func (b *bundle) startDaemon(t *testing.T, mutate func(*daemon.Config)) *runningDaemon {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), b.dsn)
	require.NoError(t, err)
	cfg := &daemon.Config{
		HTTPAddr:        "127.0.0.1:0",
		ShutdownTimeout: 10 * time.Second,
		Logger:          testLogger(t),
	}
	cfg.ThirdParty.URL = b.fakeURL
	if mutate != nil {
		mutate(cfg)
	}
	ready := make(chan string, 1)
	cfg.Ready = func(addr string) { ready <- addr }
	ctx, cancel := context.WithCancel(context.Background())
	d := &runningDaemon{cancel: cancel, done: make(chan error, 1)}
	go func() {
		d.done <- daemon.Run(ctx, pool, cfg)
		pool.Close()
	}()
	t.Cleanup(func() { require.NoError(t, d.stop()) })
	select {
	case d.addr = <-ready:
	case err := <-d.done:
		d.done <- err
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not start in 30s")
	}
	return d
}

// insert adds n rows, one statement and transaction each, from conns
// concurrent connections, and returns their ids.
func (b *bundle) insert(t *testing.T, n, conns int) []int64 {
	t.Helper()
	var mu sync.Mutex
	var ids []int64
	var wg sync.WaitGroup
	errc := make(chan error, conns)
	per := (n + conns - 1) / conns
	for c := range conns {
		wg.Go(func() {
			for i := c * per; i < min(n, (c+1)*per); i++ {
				var id int64
				err := b.pool.QueryRow(context.Background(),
					`INSERT INTO resources (payload) VALUES ($1) RETURNING id`,
					fmt.Sprintf(`{"n": %d, "pad": "0123456789abcdef0123456789abcdef"}`, i)).Scan(&id)
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	require.NoError(t, <-errc)
	return ids
}

func (b *bundle) report(t *testing.T) *status.Report {
	t.Helper()
	r, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	return r
}

var errTimeout = errors.New("timed out")

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v after %s", what, errTimeout, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDrained waits until no row is pending.
func (b *bundle) waitDrained(t *testing.T, timeout time.Duration) *status.Report {
	t.Helper()
	var r *status.Report
	waitFor(t, timeout, "drain", func() bool {
		r = b.report(t)
		return r.Pending == 0
	})
	return r
}
