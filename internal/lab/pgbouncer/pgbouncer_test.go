package pgbouncer_test

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/pgbouncer"
)

func serverPort(t *testing.T) int {
	t.Helper()
	u, err := url.Parse(dbtest.URL())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 5432
	}
	return port
}

// A PAUSE holds a query through it until the RESUME, a restart serves
// again on the same port, and neither counts as an exit by itself; a kill
// does.
func TestPauseRestartAndDeath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := pgbouncer.Start(ctx, pgbouncer.Config{Dir: t.TempDir(), ServerPort: serverPort(t), AdminUsers: []string{"postgres"}})
	require.NoError(t, err)
	defer p.Stop()

	paused := make(chan error, 1)
	go func() { paused <- p.Pause(ctx, "postgres", 2*time.Second) }()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	require.NoError(t, p.Exec(ctx, "postgres", "postgres", "SELECT 1", 10*time.Second))
	waited := time.Since(start)
	require.NoError(t, <-paused)
	require.Greater(t, waited, time.Second, "the query waited for the RESUME")

	port := p.Port()
	require.NoError(t, p.Restart(ctx, 200*time.Millisecond))
	require.Equal(t, port, p.Port())
	require.NoError(t, p.Exec(ctx, "postgres", "postgres", "SELECT 1", 5*time.Second))
	n, err := p.Transactions(ctx, "postgres", "postgres")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(2), "the readiness query and ours since the restart")
	require.Zero(t, p.Died())

	pid := p.Pid()
	require.NotZero(t, pid)
	require.NoError(t, syscallKill(pid))
	require.Eventually(t, func() bool { return p.Died() == 1 }, 10*time.Second, 50*time.Millisecond)
}

// A port taken before PgBouncer binds it (another test's listener, here
// one that resets every connection) is never returned as ready: TCP
// accepts there, but PgBouncer exited. Start fails when the caller chose
// the port.
func TestPortTakenIsNotReady(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a clean close
			}
			_ = c.Close()
		}
	}()
	taken := ln.Addr().(*net.TCPAddr).Port
	_, err = pgbouncer.Start(context.Background(), pgbouncer.Config{Dir: t.TempDir(), ServerPort: serverPort(t), Port: taken})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "port taken"), err.Error())
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
