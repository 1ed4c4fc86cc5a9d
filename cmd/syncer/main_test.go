package main

// Process-level tests: the binary is built once and driven as a user would,
// including SIGKILL and SIGTERM in the middle of a drain.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// binary is syncer; lab is syncer-lab, built beside it as make build does.
var binary, lab string

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
	lab = filepath.Join(dir, "syncer-lab")
	out, err = exec.Command("go", "build", "-o", lab, "../syncer-lab").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build syncer-lab: %v\n%s", err, out)
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
	cmd, _ := startDaemon(t, "warn", append([]string{
		"DATABASE_URL=" + e.dsn,
		"SYNCER_THIRDPARTY_URL=" + e.fakeURL,
		"SYNCER_HTTP_ADDR=" + addr,
	}, extra...)...)
	return cmd, addr
}

// startDaemon starts `syncer run`, logging JSON at level, in a clean
// environment with env, and returns it with its stderr, to be read once it
// has exited. The cleanup kills it and, if the test failed, logs its
// stderr.
func startDaemon(t *testing.T, level string, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(binary, "run", "--log-level", level, "--log-format", "json")
	cmd.Env = cleanEnv(env...)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("daemon stderr:\n%s", stderr.String())
		}
	})
	return cmd, stderr
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
