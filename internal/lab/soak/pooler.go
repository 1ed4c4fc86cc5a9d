package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/syncer-dev/syncer/internal/database"
)

// The pooler leg (Config.Pooler): how the last daemon reaches the
// database.
const (
	// PoolerOff: every daemon straight to the server (daemon 0 through
	// the proxy).
	PoolerOff = "off"
	// PoolerDirect: the last daemon's DATABASE_URL through a PgBouncer in
	// transaction mode, SYNCER_DIRECT_URL straight to the server.
	PoolerDirect = "direct"
	// PoolerOnly: the last daemon through the PgBouncer alone, with no
	// SYNCER_DIRECT_URL (once syncer needs no session state, issue 58).
	PoolerOnly = "pooled"
	// PoolerDefault is the leg of `make soak`.
	PoolerDefault = PoolerDirect
)

// pooledRole is the role the pooled daemon logs in as through the
// pooler, with the settings docs/operations.md gives a role behind a
// transaction pooler, since no session setting reaches its server
// sessions. idle_in_transaction_session_timeout is the one that matters
// here: a daemon frozen inside a transaction (daemon-sigstop) otherwise
// keeps that transaction's locks for as long as it stays frozen, the
// relay's round among them, and every daemon's relay waits on it (in a
// run of seed 911096515, the pooled daemon frozen 17 s inside a round: the
// setting ended the round's session 10 s in). A superuser, as postgres
// is: a daemon taking a lock over ends the frozen holder's session.
const pooledRole = "syncer_pooled"

// pooledRoleSQL creates pooledRole; the settings are the ones syncer
// makes itself on a direct connection (internal/database).
var pooledRoleSQL = `CREATE ROLE ` + pgx.Identifier{pooledRole}.Sanitize() + ` LOGIN SUPERUSER;
ALTER ROLE ` + pgx.Identifier{pooledRole}.Sanitize() + ` SET idle_in_transaction_session_timeout = '` + database.IdleInTransactionTimeoutDefault + `';
ALTER ROLE ` + pgx.Identifier{pooledRole}.Sanitize() + ` SET jit = off;
`

// pooledDaemon is the index of the daemon the pooler leg routes through
// PgBouncer: the last one, as daemon 0 goes through the proxy.
func pooledDaemon(daemons int) int { return daemons - 1 }

// pooler is a PgBouncer of the soak's own in front of its server, in
// transaction mode with PgBouncer's stock settings, restarted and paused
// by the schedule (pooler-restart, pooler-pause).
type pooler struct {
	bin, ini, logPath string
	port              int
	as                string // the OS user that runs it, when the soak runs as root

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopping bool  // the soak ends it: an exit meanwhile is the soak's
	died     int   // exits not the soak's doing: a violation
	xacts    int64 // transactions served before the last restart (SHOW STATS starts again at 0)
}

// pgbouncerBin finds Debian's pgbouncer.
func pgbouncerBin() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("soak: the pooler leg needs pgbouncer: run scripts/ensure-pgbouncer.sh, or --pooler off")
}

// startPooler writes the pooler's files under dir and starts it on a free
// port in front of the server on serverPort.
func startPooler(ctx context.Context, dir string, serverPort int, as string) (*pooler, error) {
	bin, err := pgbouncerBin()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &pooler{bin: bin, port: port, as: as, ini: filepath.Join(dir, "pgbouncer.ini"), logPath: filepath.Join(dir, "pgbouncer.log")}
	userlist := filepath.Join(dir, "pgbouncer-users.txt")
	if err := os.WriteFile(userlist, []byte(`"postgres" ""`+"\n"+`"`+pooledRole+`" ""`+"\n"), 0o644); err != nil {
		return nil, err
	}
	// Stock settings but for the pool mode, as internal/dbtest's: the
	// default pool of 20 server sessions, server_reset_query unused in
	// transaction mode; admin_users lets the soak PAUSE it.
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
`, serverPort, port, userlist)
	if err := os.WriteFile(p.ini, []byte(ini), 0o644); err != nil {
		return nil, err
	}
	if err := p.start(ctx); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *pooler) start(ctx context.Context) error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{p.ini}
	if p.as != "" {
		// PgBouncer refuses to run as root; it reads its files first.
		args = []string{"-u", p.as, p.ini}
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("soak: start pgbouncer: %w", err)
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
	return p.waitReady(ctx, exited)
}

// waitReady waits until a query through the pooler answers: its first
// login to the server comes with the first client.
func (p *pooler) waitReady(ctx context.Context, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("soak: pgbouncer exited at start (its log: %s)", p.logPath)
		default:
		}
		err := p.query(ctx, "postgres", "SELECT 1")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("soak: pgbouncer not ready after 30s: %w (its log: %s)", err, p.logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// url is the server's database db through the pooler, as postgres.
func (p *pooler) url(db string) string { return p.urlAs("postgres", db) }

func (p *pooler) urlAs(role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, p.port, db)
}

// query runs one statement through the pooler on a connection of its own.
func (p *pooler) query(ctx context.Context, db, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.exec(ctx, db, sql)
}

// exec runs one statement on a connection of its own to the pooler's
// database db ("pgbouncer" is its admin console), in the simple protocol
// (the admin console speaks nothing else). A cancelled ctx ends the
// connection rather than send a cancel request, which PgBouncer 1.18 may
// die of (internal/database's NoCancelRequests).
func (p *pooler) exec(ctx context.Context, db, sql string) error {
	conn, err := p.connect(ctx, db)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

func (p *pooler) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(p.url(db))
	if err != nil {
		return nil, err
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	return database.Connect(ctx, cc)
}

// restart stops the pooler (SIGTERM: PgBouncer 1.18 shuts down at once,
// every client's connection cut, as a redeploy of it does), keeps it down
// for downFor and starts it again on the same port.
func (p *pooler) restart(ctx context.Context, downFor time.Duration) error {
	if n, err := p.transactions(ctx); err == nil {
		p.mu.Lock()
		p.xacts += n
		p.mu.Unlock()
	}
	p.stop()
	sleep(ctx, downFor)
	return p.start(context.WithoutCancel(ctx))
}

// pause PAUSEs the pooler for d through its admin console, then RESUMEs
// it: clients' queries wait meanwhile, on connections that stay open. The
// PAUSE itself waits for the transactions under way (a frozen daemon's
// among them) and is given up after d; RESUME goes on a connection of its
// own, since a pause outlives the console session that asked for it.
func (p *pooler) pause(ctx context.Context, d time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, d)
	paused := make(chan error, 1)
	go func() { paused <- p.admin(pctx, "PAUSE", d) }()
	sleep(pctx, d)
	cancel()
	perr := <-paused
	if err := p.admin(context.WithoutCancel(ctx), "RESUME", 10*time.Second); err != nil {
		return fmt.Errorf("soak: pgbouncer RESUME: %w (PAUSE: %v)", err, perr)
	}
	return nil
}

// admin runs one command of the admin console, bounded by limit.
func (p *pooler) admin(ctx context.Context, command string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return p.exec(ctx, "pgbouncer", command)
}

// transactions is the count of transactions PgBouncer served to the
// server's database postgres since it started (SHOW STATS).
func (p *pooler) transactions(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := p.connect(ctx, "pgbouncer")
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := conn.Query(ctx, "SHOW STATS")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	db, xacts := -1, -1
	for i, f := range rows.FieldDescriptions() {
		switch f.Name {
		case "database":
			db = i
		case "total_xact_count":
			xacts = i
		}
	}
	if db < 0 || xacts < 0 {
		return 0, errors.New("soak: SHOW STATS has no database or total_xact_count")
	}
	var n int64
	for rows.Next() {
		vals := rows.RawValues()
		if string(vals[db]) == "postgres" {
			n, err = strconv.ParseInt(string(vals[xacts]), 10, 64)
		}
	}
	if err != nil {
		return 0, err
	}
	return n, rows.Err()
}

// served is the count of transactions the pooler served over the run, and
// how many times it exited by itself.
func (p *pooler) served(ctx context.Context) (xacts int64, died int) {
	n, _ := p.transactions(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.xacts + n, p.died
}

// stop ends the pooler, at once.
func (p *pooler) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// pooledEnv is the environment of the pooled daemon, or of a command run
// as it (httpAddr "127.0.0.1:0"): DATABASE_URL through the pooler, and
// with PoolerDirect SYNCER_DIRECT_URL straight to the server.
func (r *run) pooledEnv(httpAddr string) []string {
	env := daemonEnv(r.pooler.urlAs(pooledRole, "postgres"), r.live.url(), r.configPath, httpAddr)
	if r.cfg.Pooler == PoolerDirect {
		env = append(env, "SYNCER_DIRECT_URL="+r.dbURL)
	}
	return env
}
