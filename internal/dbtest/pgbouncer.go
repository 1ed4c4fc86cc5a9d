package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer is a PgBouncer started for one test in front of the test
// database, with PgBouncer's stock settings but for the pool mode.
type PgBouncer struct {
	// Addr is where it listens, 127.0.0.1:port.
	Addr string
	log  *Buffer
}

// Log returns what PgBouncer logged so far.
func (p *PgBouncer) Log() string { return p.log.String() }

// URL returns dsn with its host and port replaced by the PgBouncer's.
func (p *PgBouncer) URL(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := p.url(dsn)
	if err != nil {
		tb.Fatalf("dbtest: pgbouncer: %v", err)
	}
	return u
}

func (p *PgBouncer) url(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse url: %w", err)
	}
	u.Host = p.Addr
	return u.String(), nil
}

// StartPgBouncer starts Debian's pgbouncer on a free loopback port, in
// front of the database of URL(), in mode ("session", "transaction" or
// "statement"), with auth_type trust, and stops it when the test ends. Its
// settings are PgBouncer's stock ones (ignore_startup_parameters =
// extra_float_digits, server_reset_query = DISCARD ALL) but for the pool
// mode. It returns once a query through it answers, within 30 s, or fails
// the test with PgBouncer's log. A machine without pgbouncer fails the
// test: install it (apt-get install pgbouncer; .ci/run does). users are
// roles it lets in besides postgres, the URL's and the process's
// (NewRole's).
func StartPgBouncer(tb testing.TB, mode string, users ...string) *PgBouncer {
	tb.Helper()
	bin, dir, host, port := prepare(tb, users)
	// A port picked free may be taken by another test's listener before
	// PgBouncer binds it: PgBouncer then exits ("nowhere to listen on")
	// while the port answers, for someone else. Try another port.
	var lastLog string
	for range startAttempts {
		p, retry := startOn(tb, bin, dir, host, port, mode, freeLoopbackPort(tb))
		if p != nil {
			return p
		}
		lastLog = retry
	}
	tb.Fatalf("dbtest: pgbouncer could not bind a free port in %d attempts:\n%s", startAttempts, lastLog)
	return nil
}

// prepare finds pgbouncer and writes its user list: every PgBouncer of a
// test logs in to PostgreSQL at host:port.
func prepare(tb testing.TB, extra []string) (bin, dir, host, port string) {
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
	host, port = db.Hostname(), db.Port()
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
	users = append(users, extra...)

	dir = tb.TempDir()
	var userlist strings.Builder
	for _, u := range users {
		fmt.Fprintf(&userlist, "%q \"\"\n", u)
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(userlist.String()), 0o600); err != nil {
		tb.Fatalf("dbtest: pgbouncer: %v", err)
	}
	return bin, dir, host, port
}

// Bounds of StartPgBouncer's wait: a loaded machine (make test runs every
// package at once) can take seconds to schedule PgBouncer's first login.
const (
	startAttempts = 3
	readyTimeout  = 30 * time.Second
)

// startOn starts PgBouncer on listen, a free port, and waits until it is ready. It
// returns the log of a PgBouncer that could not bind its port, for the
// caller to try another one; any other failure fails the test.
func startOn(tb testing.TB, bin, dir, host, port, mode, listen string) (*PgBouncer, string) {
	tb.Helper()
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
	log := &Buffer{}
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
	p := &PgBouncer{Addr: listen, log: log}
	if err := p.waitReady(exited); err != nil {
		if errors.Is(err, errPortTaken) {
			return nil, log.String()
		}
		tb.Fatalf("dbtest: pgbouncer on %s: %v:\n%s", listen, err, log.String())
	}
	return p, ""
}

// errPortTaken is waitReady's error when PgBouncer could not bind its port.
var errPortTaken = errors.New("port taken")

// waitReady waits until this PgBouncer, and not whatever else may hold its
// port, says it listens, and a query through it to the test database
// answers. A TCP accept alone is not enough: PgBouncer logs in to
// PostgreSQL on the first client, and on a loaded machine that first login
// can be refused or reset; a test must begin with a pooler that answers,
// as NewSchema begins with a PostgreSQL that does. Errors while it comes
// up are retried until readyTimeout.
func (p *PgBouncer) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	listening := "listening on " + p.Addr
	var last error
	for {
		select {
		case <-exited:
			if strings.Contains(p.log.String(), "Address already in use") {
				return errPortTaken
			}
			return errors.New("exited at start")
		default:
		}
		if !strings.Contains(p.log.String(), listening) {
			last = errors.New("has not said " + listening + " yet")
		} else if last = p.answers(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", readyTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// answers runs one query through the PgBouncer, in the simple protocol
// (what any pool mode serves), on a connection of its own.
func (p *PgBouncer) answers() error {
	dsn, err := p.url(URL())
	if err != nil {
		return err
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
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

// TxPooler is a schema behind a PgBouncer in transaction mode, as a
// daemon sees it: the URL through the pooler and the direct URL
// (SYNCER_DIRECT_URL).
type TxPooler struct {
	*PgBouncer
	// Role is the login role of Pooled, named after the schema, whose
	// sessions start with the schema on their search_path (NewRole).
	Role string
	// Pooled is the schema's URL through the PgBouncer, as Role, with no
	// search_path (a transaction pooler passes none in the startup
	// packet) and no application_name.
	Pooled string
	// Direct is dsn with no application_name: a daemon names its own
	// sessions after its pid, which says which daemon holds a lock.
	Direct string
}

// StartTxPooler starts a PgBouncer in transaction mode (StartPgBouncer)
// in front of schema, whose URL straight to PostgreSQL is dsn, with a role
// of its own (NewRole).
func StartTxPooler(tb testing.TB, dsn, schema string) *TxPooler {
	tb.Helper()
	role := NewRole(tb, schema)
	pgb := StartPgBouncer(tb, "transaction", role)
	u, err := url.Parse(pgb.URL(tb, dsn))
	if err != nil {
		tb.Fatalf("dbtest: pgbouncer: parse url: %v", err)
	}
	u.User = url.User(role)
	q := u.Query()
	q.Del("search_path")
	q.Del("application_name")
	u.RawQuery = q.Encode()
	d, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("dbtest: parse url: %v", err)
	}
	dq := d.Query()
	dq.Del("application_name")
	d.RawQuery = dq.Encode()
	return &TxPooler{PgBouncer: pgb, Role: role, Pooled: u.String(), Direct: d.String()}
}
