package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/lab/pgbouncer"
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
	*pgbouncer.Process

	mu    sync.Mutex
	xacts int64 // transactions served before the last restart (SHOW STATS starts again at 0)
}

// startPooler writes the pooler's files under dir and starts it on a free
// port in front of the server on serverPort; admin_users lets the soak
// PAUSE it.
func startPooler(ctx context.Context, dir string, serverPort int) (*pooler, error) {
	if _, err := pgbouncer.Find(); err != nil {
		return nil, fmt.Errorf("soak: the pooler leg needs pgbouncer: run scripts/ensure-pgbouncer.sh, or --pooler off: %w", err)
	}
	p, err := pgbouncer.Start(ctx, pgbouncer.Config{
		Dir:        dir,
		ServerPort: serverPort,
		Users:      []string{pooledRole},
		AdminUsers: []string{"postgres"},
	})
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	return &pooler{Process: p}, nil
}

// url is the server's database db through the pooler, as postgres.
func (p *pooler) url(db string) string { return p.URL("postgres", db) }

// restart keeps the count of transactions served across a restart of the
// pooler (pgbouncer.Process.Restart).
func (p *pooler) restart(ctx context.Context, downFor time.Duration) error {
	if n, err := p.Transactions(ctx, "postgres", "postgres"); err == nil {
		p.mu.Lock()
		p.xacts += n
		p.mu.Unlock()
	}
	return p.Restart(ctx, downFor)
}

// served is the count of transactions the pooler served over the run, and
// how many times it exited by itself.
func (p *pooler) served(ctx context.Context) (xacts int64, died int) {
	n, _ := p.Transactions(ctx, "postgres", "postgres")
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.xacts + n, p.Died()
}

// pooledEnv is the environment of the pooled daemon, or of a command run
// as it (httpAddr "127.0.0.1:0"): DATABASE_URL through the pooler, and
// with PoolerDirect SYNCER_DIRECT_URL straight to the server.
func (r *run) pooledEnv(httpAddr string) []string {
	env := daemonEnv(r.pooler.URL(pooledRole, "postgres"), r.live.url(), r.configPath, httpAddr)
	if r.cfg.Pooler == PoolerDirect {
		env = append(env, "SYNCER_DIRECT_URL="+r.dbURL)
	}
	return env
}
