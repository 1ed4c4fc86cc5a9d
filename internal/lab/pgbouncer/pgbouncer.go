// Package pgbouncer runs a PgBouncer of its own in front of a PostgreSQL
// server, for the tests (internal/dbtest), the soak and the bench: one
// place that writes its settings, starts it on a free port, waits until a
// query through it answers, and restarts, pauses and stops it.
//
// Its settings are PgBouncer's stock ones but for the pool mode, on
// purpose: syncer must work behind the pooler a user installs, not one
// tuned for it.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/syncer-dev/syncer/internal/lab"
)

// ErrNotInstalled is Find's error on a machine without PgBouncer
// (scripts/ensure-pgbouncer.sh installs Debian's).
var ErrNotInstalled = errors.New("pgbouncer is not installed (apt-get install -y pgbouncer; scripts/ensure-pgbouncer.sh)")

// Find returns the path of Debian's pgbouncer.
func Find() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNotInstalled
}

// Config is a PgBouncer's settings.
type Config struct {
	// Dir holds its settings, user list and log. Required; the caller
	// owns it (a test's TempDir, a soak's run directory).
	Dir string
	// ServerHost and ServerPort are PostgreSQL's. Default host 127.0.0.1.
	ServerHost string
	ServerPort int
	// Port is where it listens on 127.0.0.1. Zero picks a free port, and
	// another one if that port is taken before PgBouncer binds it.
	Port int
	// Mode is the pool mode. Default "transaction".
	Mode string
	// Users are the roles it lets in, with auth_type trust, besides
	// postgres.
	Users []string
	// AdminUsers may use its admin console (PAUSE, SHOW STATS).
	AdminUsers []string
	// ServerResetQuery, when set, is server_reset_query (PgBouncer runs
	// it in session mode only).
	ServerResetQuery string
	// ProbeUser and ProbeDB are whom the readiness query logs in as and
	// to. Default postgres and postgres.
	ProbeUser, ProbeDB string
	// Bin is the pgbouncer binary. Default Find's.
	Bin string
}

// Bounds of Start's wait: a loaded machine (make test runs every package
// at once) can take seconds to schedule PgBouncer's first login.
const (
	startAttempts = 3
	readyTimeout  = 30 * time.Second
)

// Process is a running PgBouncer.
type Process struct {
	cfg     Config
	ini     string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopping bool // Stop or Restart ends it: an exit meanwhile is ours
	died     int  // exits nobody asked for
}

// Start writes cfg's files under cfg.Dir and starts PgBouncer, returning
// once a query through it answers (within 30 s), or an error with its log.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgbouncer: Config.Dir is required")
	}
	if cfg.ServerHost == "" {
		cfg.ServerHost = "127.0.0.1"
	}
	if cfg.Mode == "" {
		cfg.Mode = "transaction"
	}
	if cfg.ProbeUser == "" {
		cfg.ProbeUser = "postgres"
	}
	if cfg.ProbeDB == "" {
		cfg.ProbeDB = "postgres"
	}
	if cfg.Bin == "" {
		bin, err := Find()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	p := &Process{cfg: cfg, ini: filepath.Join(cfg.Dir, "pgbouncer.ini"), logPath: filepath.Join(cfg.Dir, "pgbouncer.log")}
	if err := p.writeUsers(); err != nil {
		return nil, err
	}
	// A port picked free may be taken by another listener before
	// PgBouncer binds it: PgBouncer then exits ("nowhere to listen on")
	// while the port answers, for someone else. Try another port.
	fixed := cfg.Port != 0
	for attempt := 1; ; attempt++ {
		if !fixed {
			port, err := lab.FreePort()
			if err != nil {
				return nil, err
			}
			p.cfg.Port = port
		}
		err := p.writeIni()
		if err == nil {
			err = p.start(ctx)
		}
		if err == nil {
			return p, nil
		}
		p.Stop()
		if !errors.Is(err, errPortTaken) || fixed || attempt == startAttempts {
			return nil, err
		}
	}
}

func (p *Process) writeUsers() error {
	var list strings.Builder
	seen := map[string]bool{}
	for _, u := range append([]string{"postgres"}, p.cfg.Users...) {
		if u == "" || seen[u] {
			continue
		}
		seen[u] = true
		fmt.Fprintf(&list, "%q \"\"\n", u)
	}
	return os.WriteFile(filepath.Join(p.cfg.Dir, "pgbouncer-users.txt"), []byte(list.String()), 0o644)
}

func (p *Process) writeIni() error {
	var extra strings.Builder
	if len(p.cfg.AdminUsers) > 0 {
		fmt.Fprintf(&extra, "admin_users = %s\n", strings.Join(p.cfg.AdminUsers, ","))
	}
	if p.cfg.ServerResetQuery != "" {
		fmt.Fprintf(&extra, "server_reset_query = %s\n", p.cfg.ServerResetQuery)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
%s`, p.cfg.ServerHost, p.cfg.ServerPort, p.cfg.Port, filepath.Join(p.cfg.Dir, "pgbouncer-users.txt"), p.cfg.Mode, extra.String())
	// 0644: PgBouncer runs as postgres when we are root, and reads it.
	return os.WriteFile(p.ini, []byte(ini), 0o644)
}

// errPortTaken is waitReady's error when PgBouncer could not bind its port.
var errPortTaken = errors.New("pgbouncer: port taken")

func (p *Process) start(ctx context.Context) error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// The log stays whole across restarts: waitReady reads only what this
	// start added.
	from, _ := log.Seek(0, 2)
	args := []string{p.ini}
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root; it reads its files first.
		args = []string{"-u", "postgres", p.ini}
	}
	cmd := exec.Command(p.cfg.Bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgbouncer: start: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		p.mu.Lock()
		if !p.stopping {
			p.died++
		}
		p.mu.Unlock()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited, p.stopping = cmd, exited, false
	p.mu.Unlock()
	return p.waitReady(ctx, exited, from)
}

// waitReady waits until this PgBouncer, and not whatever else may hold its
// port, says it listens, and a query through it answers. A TCP accept
// alone is not enough: PgBouncer logs in to PostgreSQL on the first
// client, and on a loaded machine that first login can be refused or
// reset. Errors while it comes up are retried until readyTimeout.
func (p *Process) waitReady(ctx context.Context, exited <-chan struct{}, from int64) error {
	deadline := time.Now().Add(readyTimeout)
	listening := "listening on " + p.Addr()
	var last error
	for {
		select {
		case <-exited:
			p.mu.Lock()
			p.died-- // a failed start is the caller's error, not a death
			p.mu.Unlock()
			log := p.logSince(from)
			if strings.Contains(log, "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("pgbouncer: exited at start: %s", log)
		default:
		}
		if !strings.Contains(p.logSince(from), listening) {
			last = errors.New("has not said " + listening + " yet")
		} else if last = p.Exec(ctx, p.cfg.ProbeUser, p.cfg.ProbeDB, "SELECT 1", 5*time.Second); last == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pgbouncer: not ready after %s: %w: %s", readyTimeout, last, p.logSince(from))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addr is where it listens, 127.0.0.1:port.
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.cfg.Port)) }

// Port is the port it listens on.
func (p *Process) Port() int { return p.cfg.Port }

// LogPath is its log file, kept whole across restarts.
func (p *Process) LogPath() string { return p.logPath }

// Log returns what it logged so far.
func (p *Process) Log() string { return p.logSince(0) }

func (p *Process) logSince(from int64) string {
	raw, _ := os.ReadFile(p.logPath)
	if from > int64(len(raw)) {
		from = 0
	}
	return string(raw[from:])
}

// URL is database db through it, as role.
func (p *Process) URL(role, db string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", role, p.Addr(), db)
}

// Pid is the running process's, 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Died is how many times it exited without Stop or Restart asking.
func (p *Process) Died() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.died
}

// Exec runs one statement through it as role to database db ("pgbouncer"
// is its admin console), on a connection of its own, in the simple
// protocol (what every pool mode and the admin console serve), bounded by
// limit. A cancelled ctx ends the connection rather than send a cancel
// request, which PgBouncer 1.18 may die of.
func (p *Process) Exec(ctx context.Context, role, db, sql string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	conn, err := p.connect(ctx, role, db)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

func (p *Process) connect(ctx context.Context, role, db string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(p.URL(role, db))
	if err != nil {
		return nil, err
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	return pgx.ConnectConfig(ctx, cc)
}

// Restart stops it (SIGTERM: PgBouncer shuts down at once, every client's
// connection cut, as a redeploy of it does), keeps it down for downFor and
// starts it again on the same port.
func (p *Process) Restart(ctx context.Context, downFor time.Duration) error {
	p.Stop()
	t := time.NewTimer(downFor)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	return p.start(context.WithoutCancel(ctx))
}

// Pause PAUSEs it for d through its admin console as admin, then RESUMEs
// it: clients' queries wait meanwhile, on connections that stay open. The
// PAUSE itself waits for the transactions under way and is given up after
// d; RESUME goes on a connection of its own, since a pause outlives the
// console session that asked for it.
func (p *Process) Pause(ctx context.Context, admin string, d time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, d)
	paused := make(chan error, 1)
	go func() { paused <- p.Exec(pctx, admin, "pgbouncer", "PAUSE", d) }()
	<-pctx.Done()
	cancel()
	perr := <-paused
	if err := p.Exec(context.WithoutCancel(ctx), admin, "pgbouncer", "RESUME", 10*time.Second); err != nil {
		return fmt.Errorf("pgbouncer: RESUME: %w (PAUSE: %v)", err, perr)
	}
	return nil
}

// Transactions is the count of transactions it served to database db
// since it started (SHOW STATS, as admin; a restart starts it at 0).
func (p *Process) Transactions(ctx context.Context, admin, db string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := p.connect(ctx, admin, "pgbouncer")
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := conn.Query(ctx, "SHOW STATS")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	dbCol, xacts := -1, -1
	for i, f := range rows.FieldDescriptions() {
		switch f.Name {
		case "database":
			dbCol = i
		case "total_xact_count":
			xacts = i
		}
	}
	if dbCol < 0 || xacts < 0 {
		return 0, errors.New("pgbouncer: SHOW STATS has no database or total_xact_count")
	}
	var n int64
	for rows.Next() {
		vals := rows.RawValues()
		if string(vals[dbCol]) == db {
			n, err = strconv.ParseInt(string(vals[xacts]), 10, 64)
		}
	}
	if err != nil {
		return 0, err
	}
	return n, rows.Err()
}

// Stop ends it, at once (SIGTERM, SIGKILL after 10 s). Its files stay in
// Dir, which the caller owns.
func (p *Process) Stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.stopping = true
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}
