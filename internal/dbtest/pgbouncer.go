package dbtest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PgBouncer is a PgBouncer started for one test in front of the test
// database, with PgBouncer's stock settings but for the pool mode.
type PgBouncer struct {
	// Addr is where it listens, 127.0.0.1:port.
	Addr string
	log  *syncBuffer
}

// Log returns what PgBouncer logged so far.
func (p *PgBouncer) Log() string { return p.log.String() }

// URL returns dsn with its host and port replaced by the PgBouncer's.
func (p *PgBouncer) URL(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("dbtest: pgbouncer: parse url: %v", err)
	}
	u.Host = p.Addr
	return u.String()
}

// StartPgBouncer starts Debian's pgbouncer on a free loopback port, in
// front of the database of URL(), in mode ("session", "transaction" or
// "statement"), with auth_type trust, and stops it when the test ends. Its
// settings are PgBouncer's stock ones (ignore_startup_parameters =
// extra_float_digits, server_reset_query = DISCARD ALL) but for the pool
// mode. A machine without pgbouncer fails the test: install it
// (apt-get install pgbouncer; .ci/run does).
func StartPgBouncer(tb testing.TB, mode string) *PgBouncer {
	tb.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			tb.Fatalf("dbtest: pgbouncer is not installed: apt-get install -y pgbouncer (.ci/run installs it): %v", err)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	db, err := url.Parse(URL())
	if err != nil {
		tb.Fatalf("dbtest: parse url: %v", err)
	}
	host, port := db.Hostname(), db.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	users := []string{"postgres"}
	if db.User != nil && db.User.Username() != "" {
		users = append(users, db.User.Username())
	}
	if me, err := user.Current(); err == nil {
		users = append(users, me.Username)
	}

	dir := tb.TempDir()
	var userlist strings.Builder
	for _, u := range users {
		fmt.Fprintf(&userlist, "%q \"\"\n", u)
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(userlist.String()), 0o600); err != nil {
		tb.Fatalf("dbtest: pgbouncer: %v", err)
	}
	listen := freeLoopbackPort(tb)
	_, lport, _ := net.SplitHostPort(listen)
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
server_reset_query = DISCARD ALL
`, host, port, lport, filepath.Join(dir, "userlist.txt"), mode)
	iniPath := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(iniPath, []byte(ini), 0o600); err != nil {
		tb.Fatalf("dbtest: pgbouncer: %v", err)
	}

	args := []string{iniPath}
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root; it reads its files first.
		args = []string{"-u", "postgres", iniPath}
	}
	log := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("dbtest: start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-exited:
			tb.Fatalf("dbtest: pgbouncer exited at start:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("dbtest: pgbouncer does not listen on %s after 10s:\n%s", listen, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &PgBouncer{Addr: listen, log: log}
}

func freeLoopbackPort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("dbtest: free port: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// syncBuffer is a bytes.Buffer safe for a process's output and a test's
// reads at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
