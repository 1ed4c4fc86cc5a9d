package soak

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// daemon is one `syncer run` of the soak: a real process, killed, frozen
// and restarted by the schedule.
type daemon struct {
	i        int
	binary   string
	env      []string
	logPath  string
	httpAddr string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool // SIGSTOPped
	down    bool // killed or terminated, not yet restarted
	exits   []string
	// restarts counts the starts after an exit at start (startAgain).
	restarts int
}

func newDaemon(i int, binary, dir, httpAddr string, env []string) *daemon {
	return &daemon{i: i, binary: binary, env: env, httpAddr: httpAddr, logPath: filepath.Join(dir, fmt.Sprintf("daemon-%d.log", i))}
}

func (d *daemon) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	log, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(d.binary, "run")
	cmd.Env = d.env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("soak: start daemon %d: %w", d.i, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		log.Close()
		d.mu.Lock()
		if err != nil {
			d.exits = append(d.exits, err.Error())
		}
		// Exited by itself, not by the soak's hand: a supervisor
		// (systemd's Restart=on-failure, a pod's restart policy) starts
		// a daemon that could not reach the database at its start again;
		// syncer leaves that to it (a restart of the soak's while the
		// server restarts, seeds 3, 15, 112, 212).
		again := err != nil && !d.down && d.cmd == cmd && unreachableAtStart(d.logPath)
		d.mu.Unlock()
		close(exited)
		if again {
			go d.startAgain(cmd)
		}
	}()
	d.cmd, d.exited, d.down, d.stopped = cmd, exited, false, false
	return nil
}

// startAgain starts the daemon again a second after it exited at its
// start, unless the soak took it down or started it since.
func (d *daemon) startAgain(exited *exec.Cmd) {
	time.Sleep(time.Second)
	d.mu.Lock()
	if d.down || d.cmd != exited {
		d.mu.Unlock()
		return
	}
	d.restarts++
	d.mu.Unlock()
	_ = d.start()
}

// unreachableAtStart reports whether the log at path ends with `syncer
// run`'s exit for a database it could not reach at its start.
func unreachableAtStart(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false
	}
	buf := make([]byte, min(st.Size(), 1024))
	if _, err := f.ReadAt(buf, st.Size()-int64(len(buf))); err != nil {
		return false
	}
	lines := strings.Split(strings.TrimSpace(string(buf)), "\n")
	return strings.HasPrefix(lines[len(lines)-1], "syncer: run: database: cannot connect")
}

func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.down {
		return 0
	}
	return d.cmd.Process.Pid
}

func (d *daemon) signal(sig syscall.Signal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.down {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	switch sig {
	case syscall.SIGSTOP:
		d.stopped = true
	case syscall.SIGCONT:
		d.stopped = false
	}
}

// kill sends sig (SIGKILL or SIGTERM), waits for the exit (a frozen
// process is woken first, or SIGTERM would wait for ever), stays down for
// downFor and starts again.
func (d *daemon) kill(ctx context.Context, sig syscall.Signal, downFor time.Duration) error {
	d.mu.Lock()
	if d.cmd == nil || d.down {
		d.mu.Unlock()
		return nil
	}
	d.down = true
	if d.stopped {
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
		d.stopped = false
	}
	_ = d.cmd.Process.Signal(sig)
	exited := d.exited
	d.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		d.mu.Lock()
		_ = d.cmd.Process.Kill()
		d.mu.Unlock()
		<-exited
	}
	select {
	case <-time.After(downFor):
	case <-ctx.Done():
	}
	return d.start()
}

// terminate ends the daemon for good with SIGTERM, as a deploy does, and
// reports whether it exited 0 within the timeout.
func (d *daemon) terminate(timeout time.Duration) (bool, string) {
	d.mu.Lock()
	if d.cmd == nil || d.down {
		d.mu.Unlock()
		return true, ""
	}
	if d.stopped {
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	cmd, exited := d.cmd, d.exited
	d.down = true
	d.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
		return false, "did not exit within " + timeout.String()
	}
	if cmd.ProcessState.ExitCode() != 0 {
		return false, "exited " + cmd.ProcessState.String()
	}
	return true, ""
}

// daemonEnv is the environment of a daemon: this process's, less every
// setting of syncer's, plus the soak's.
func daemonEnv(dbURL, apiURL, configPath, httpAddr string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SYNCER_") || strings.HasPrefix(kv, "DATABASE_URL") || strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"DATABASE_URL="+dbURL,
		"SYNCER_THIRDPARTY_URL="+apiURL,
		"SYNCER_CONFIG="+configPath,
		"SYNCER_HTTP_ADDR="+httpAddr,
		"SYNCER_LOG_FORMAT=json",
		"SYNCER_LOG_LEVEL=info",
		"SYNCER_SHUTDOWN_TIMEOUT=10s",
		"SOAK_HOOKS_SECRET="+hooksSecret,
	)
}

// waitLive waits until every daemon answers GET /healthz, for at most
// limit.
func (r *run) waitLive(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for _, d := range r.daemons {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.httpAddr+"/healthz", nil)
			if err != nil {
				return err
			}
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("soak: daemon %d does not serve /healthz after %s (its log: %s)", d.i, limit, d.logPath)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
