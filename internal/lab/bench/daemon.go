package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/syncer-dev/syncer/internal/lab"
)

// daemon is a `syncer run` subprocess.
type daemon struct {
	cmd     *exec.Cmd
	addr    string
	stderr  *tailBuffer
	done    chan struct{}
	waitErr error
	started time.Time
}

// freeAddr is a loopback address nobody listens on right now. The daemon
// is told its address so the bench can reach /readyz and pprof without
// parsing logs.
func freeAddr() (string, error) {
	port, err := lab.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// startDaemon starts the daemon on s and waits until it is ready. started
// is taken just before the process starts.
// settings change the daemon's defaults: a "--flag" (with its value as the
// next setting) follows the default flags, so it wins; a "NAME=value"
// changes the daemon's environment (see mergeEnv).
func (r *runner) startDaemon(ctx context.Context, s *scratch, f *fake, pprof bool, settings ...string) (*daemon, error) {
	var extra, env []string
	for i := 0; i < len(settings); i++ {
		if strings.HasPrefix(settings[i], "--") {
			extra = append(extra, settings[i])
			if i+1 < len(settings) && !strings.Contains(settings[i], "=") {
				i++
				extra = append(extra, settings[i])
			}
			continue
		}
		env = append(env, settings[i])
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("bench: find a port for the daemon: %w", err)
	}
	args := []string{"run",
		"--database-url", s.dsn,
		"--thirdparty-url", f.url,
		"--http-addr", addr,
		"--batch-size", strconv.Itoa(r.sizes.BatchSize),
		"--rate-limit", "0",
		"--shutdown-timeout", "10s",
		"--log-level", "warn",
		"--log-format", "text",
	}
	if pprof {
		args = append(args, "--pprof")
	}
	args = append(args, extra...)
	d := &daemon{addr: addr, stderr: &tailBuffer{max: 16 << 10}, done: make(chan struct{})}
	d.cmd = exec.Command(r.cfg.Binary, args...)
	d.cmd.Stdout = d.stderr
	d.cmd.Stderr = d.stderr
	if len(env) > 0 {
		d.cmd.Env = mergeEnv(os.Environ(), env)
	}
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the daemon %s: %w", r.cfg.Binary, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if err := d.waitReady(ctx, 30*time.Second); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

func (d *daemon) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/readyz", nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("bench: the daemon exited before it was ready (%v): %s", d.waitErr, d.stderr.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the daemon was not ready after %s: %s", limit, d.stderr.String())
		}
	}
}

// metric returns the sum of a metric's samples (over its labels, if any)
// from the daemon's /metrics.
func (d *daemon) metric(ctx context.Context, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench: metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue
		}
		if i := strings.LastIndexByte(rest, ' '); i >= 0 {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest[i+1:]), 64)
			if err != nil {
				return 0, fmt.Errorf("bench: metrics: %s: %w", name, err)
			}
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("bench: metrics: no %s", name)
	}
	return sum, nil
}

// stop sends SIGTERM and waits; a daemon that does not stop in time is
// killed. It returns an error when the daemon did not exit 0.
func (d *daemon) stop() error {
	select {
	case <-d.done:
	default:
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
			return fmt.Errorf("bench: the daemon did not stop within 30s of SIGTERM: %s", d.stderr.String())
		}
	}
	if d.waitErr != nil {
		return fmt.Errorf("bench: the daemon exited with %v: %s", d.waitErr, d.stderr.String())
	}
	return nil
}

// profile saves a CPU profile of the daemon over seconds to path.
func (d *daemon) profile(ctx context.Context, seconds int, path string) error {
	return d.savePprof(ctx, fmt.Sprintf("profile?seconds=%d", seconds), path)
}

// savePprof saves the daemon's /debug/pprof/<what> to path.
func (d *daemon) savePprof(ctx context.Context, what, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/%s", d.addr, what), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: %s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: %s: status %d", what, resp.StatusCode)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return fmt.Errorf("bench: %s: %w", what, err)
	}
	return out.Close()
}

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(t.buf.String())
	if s == "" {
		return "(no output)"
	}
	return s
}
