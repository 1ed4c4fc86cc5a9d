package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// errNoPgBouncer is pgBouncerBin's error on a machine without PgBouncer:
// its rows are skipped, not failed (scripts/ensure-pgbouncer.sh installs it).
var errNoPgBouncer = errors.New("pgbouncer not installed")

// pgBouncerBin finds Debian's pgbouncer.
func pgBouncerBin() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errNoPgBouncer
}

// pgBouncer is a PgBouncer of the bench's own in transaction mode in front
// of a server, with stock settings but for the pool mode, as
// internal/dbtest's and the soak's.
type pgBouncer struct {
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

// startPgBouncer starts PgBouncer on a free port in front of the server
// on serverPort, letting in postgres and users, and returns once a query
// through it answers.
func startPgBouncer(ctx context.Context, bin string, serverPort int, users ...string) (_ *pgBouncer, err error) {
	p := &pgBouncer{exited: make(chan struct{})}
	if p.dir, err = os.MkdirTemp("", "syncer-bench-pgbouncer-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	p.port, _ = strconv.Atoi(port)
	var list strings.Builder
	for _, u := range append([]string{"postgres"}, users...) {
		fmt.Fprintf(&list, "%q \"\"\n", u)
	}
	userlist := filepath.Join(p.dir, "userlist.txt")
	if err := os.WriteFile(userlist, []byte(list.String()), 0o600); err != nil {
		return nil, err
	}
	ini := filepath.Join(p.dir, "pgbouncer.ini")
	if err := os.WriteFile(ini, fmt.Appendf(nil, `[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
`, serverPort, p.port, userlist), 0o600); err != nil {
		return nil, err
	}
	args := []string{ini}
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root; it reads its files first.
		args = []string{"-u", "postgres", ini}
	}
	p.cmd = exec.Command(bin, args...)
	log, err := os.Create(filepath.Join(p.dir, "log"))
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("bench: start pgbouncer: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("bench: pgbouncer exited at start: %s", p.log())
		default:
		}
		if err = p.answers(ctx); err == nil {
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("bench: pgbouncer not ready after 30s: %w: %s", err, p.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// url is database db through the pooler, as role.
func (p *pgBouncer) url(role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, p.port, db)
}

// answers runs one query through the pooler, in the simple protocol.
func (p *pgBouncer) answers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cc, err := pgx.ParseConfig(p.url("postgres", "postgres"))
	if err != nil {
		return err
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// cpuSeconds is the CPU PgBouncer used so far.
func (p *pgBouncer) cpuSeconds() float64 {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	f, err := procStat(p.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return f.utime + f.stime
}

func (p *pgBouncer) log() string {
	raw, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	return string(raw)
}

// stop ends PgBouncer and removes its files.
func (p *pgBouncer) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}
