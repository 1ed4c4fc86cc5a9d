package bench

import (
	"context"
	"os"

	"github.com/syncer-dev/syncer/internal/lab/pgbouncer"
)

// pgBouncer is a PgBouncer of the bench's own in transaction mode in front
// of a server (internal/lab/pgbouncer), with its files in a directory the
// bench removes at stop.
type pgBouncer struct {
	*pgbouncer.Process
	dir string
}

// startPgBouncer starts PgBouncer on a free port in front of the server
// on serverPort, letting in postgres and users, and returns once a query
// through it answers.
func startPgBouncer(ctx context.Context, serverPort int, users ...string) (*pgBouncer, error) {
	dir, err := os.MkdirTemp("", "syncer-bench-pgbouncer-")
	if err != nil {
		return nil, err
	}
	p, err := pgbouncer.Start(ctx, pgbouncer.Config{Dir: dir, ServerPort: serverPort, Users: users})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &pgBouncer{Process: p, dir: dir}, nil
}

// cpuSeconds is the CPU PgBouncer used so far.
func (p *pgBouncer) cpuSeconds() float64 {
	f, err := procStat(p.Pid())
	if err != nil {
		return 0
	}
	return f.utime + f.stime
}

// stop ends PgBouncer and removes its files.
func (p *pgBouncer) stop() {
	p.Stop()
	_ = os.RemoveAll(p.dir)
}
