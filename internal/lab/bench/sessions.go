package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// The sessions scenario (issue 58, contract section 12, "Sessions"): one
// daemon with three sources and a tenant source of 16 lanes and 200
// tenants, and the server sessions it holds.
//
//   - sessions: idle: the most sessions seen while nothing is pending,
//     after the start's jobs ended. Target <= 4.
//   - sessions: under load: the most seen while writers insert into all
//     four tables (every tenant, every lane busy). Target <= 8.
//
// A session is the daemon's when its client port is one of the daemon
// process's own TCP sockets to the database (read from /proc), and it is
// counted twice, both ways: the daemon's sockets to the database's port,
// and pg_stat_activity's rows on those ports. The peak is the larger. The
// note lists what the sessions seen at the peak ran last, for the reader
// who wants to know which part holds them.

// ScenarioSessions is the sessions scenario's name, as --only takes it.
const ScenarioSessions = "sessions"

const (
	sessionsIdleRow = "sessions: idle"
	sessionsLoadRow = "sessions: under load"
)

// sessionTargets are the contract's.
const (
	sessionsIdleMax = 4
	sessionsLoadMax = 8
)

// sessionsTenants is the tenant source's tenants.
const sessionsTenants = 200

// sessionsScenario measures both rows on one daemon.
func (r *runner) sessionsScenario(ctx context.Context) ([]Row, error) {
	idleFor, loadFor := 10*time.Second, 20*time.Second
	if r.cfg.Size == SizeTiny {
		idleFor, loadFor = 3*time.Second, 4*time.Second
	}
	f, err := startFakeWith(fakethirdparty.Config{})
	if err != nil {
		return nil, err
	}
	defer f.close()
	dir, err := os.MkdirTemp("", "syncer-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path, err := writeSessionsConfig(dir, f.url)
	if err != nil {
		return nil, err
	}
	s, err := r.newScratch(ctx, "sessions", false)
	if err != nil {
		return nil, err
	}
	defer s.drop(ctx)
	for _, t := range []string{"orders_a", "orders_b", "orders_c"} {
		if _, err := s.pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{t}.Sanitize()+" "+ordersTable); err != nil {
			return nil, fmt.Errorf("bench: create %s: %w", t, err)
		}
	}
	if _, err := s.pool.Exec(ctx, "CREATE TABLE contacts "+tenantTable); err != nil {
		return nil, fmt.Errorf("bench: create contacts: %w", err)
	}
	if err := s.migrate(ctx, path); err != nil {
		return nil, err
	}
	dbPort, err := r.databasePort()
	if err != nil {
		return nil, err
	}
	d, err := r.startDaemon(ctx, s, f, false, "--config", path, "--thirdparty-url=")
	if err != nil {
		return nil, err
	}
	defer d.stop()
	pid := d.cmd.Process.Pid

	// A row for every tenant first, so every lane has run once and the
	// start's jobs are over before the idle window.
	if err := s.preloadTenants(ctx, "t", sessionsTenants, 1); err != nil {
		return nil, err
	}
	if err := s.waitChanges(ctx, drainLimit(sessionsTenants), d); err != nil {
		return nil, err
	}
	// Idle: the start's jobs over, and what the pool opened for them
	// closed (database.PoolIdleTimeDefault, 30 s, checked every 5 s).
	time.Sleep(40 * time.Second)

	r.progressf("   idle for %s", idleFor)
	idleBefore := poolWaits(ctx, d)
	idle, err := sampleSessions(ctx, s, pid, dbPort, idleFor, nil)
	if err != nil {
		return nil, err
	}
	// What a short idle close costs: connections opened while idle, each
	// a backend's start on the server.
	if idleAfter := poolWaits(ctx, d); idleBefore.ok && idleAfter.ok {
		r.note("sessions: idle, the pool opened %.0f connections in %s for %.0f acquires",
			idleAfter.opened-idleBefore.opened, idleFor, idleAfter.acquires-idleBefore.acquires)
	}
	r.progressf("   under load for %s: 4 writers, every tenant", loadFor)
	before := poolWaits(ctx, d)
	load, err := sampleSessions(ctx, s, pid, dbPort, loadFor, func(ctx context.Context) error { return sessionsWriters(ctx, s) })
	if err != nil {
		return nil, err
	}
	if after := poolWaits(ctx, d); before.ok && after.ok {
		r.note("sessions: under load the pool's acquires waited for a connection %.0f times of %.0f, %.2f s in all",
			after.waited-before.waited, after.acquires-before.acquires, after.seconds-before.seconds)
		// Opened under load: a trim of idle connections must not churn them.
		r.note("sessions: under load, the pool opened %.0f connections in %s",
			after.opened-before.opened, loadFor)
	}
	if err := s.waitChanges(ctx, drainLimit(0), d); err != nil {
		return nil, err
	}
	if err := d.stop(); err != nil {
		return nil, err
	}
	r.note("sessions: at the idle peak the daemon's sessions had last run: %s", idle.last)
	r.note("sessions: at the load peak the daemon's sessions had last run: %s", load.last)
	row := func(name string, p sessionPeak, limit int, what string) Row {
		return Row{
			Scenario: name,
			Measured: fmt.Sprintf("%d server sessions at the peak (%d sockets, %d in pg_stat_activity), %s", p.peak(), p.sockets, p.activity, what),
			Baseline: "-",
			Figure:   strconv.Itoa(p.peak()),
			Target:   fmt.Sprintf("<= %d", limit),
			Pass:     p.peak() <= limit,
			Values:   map[string]float64{"sessions": float64(p.peak()), "sockets": float64(p.sockets), "activity": float64(p.activity)},
		}
	}
	return []Row{
		row(sessionsIdleRow, idle, sessionsIdleMax, fmt.Sprintf("idle %s", idleFor)),
		row(sessionsLoadRow, load, sessionsLoadMax, fmt.Sprintf("%s of inserts into 4 sources, %d tenants", loadFor, sessionsTenants)),
	}, nil
}

// writeSessionsConfig writes three sources to one destination each and
// contacts, a tenant source of 16 lanes, each tenant at its own account.
func writeSessionsConfig(dir, fakeURL string) (string, error) {
	var b strings.Builder
	b.WriteString("destinations:\n")
	for _, n := range []string{"a", "b", "c"} {
		fmt.Fprintf(&b, "  dest_%s:\n    url: %s\n", n, fakeURL)
	}
	fmt.Fprintf(&b, "  crm:\n    url: %s/t/{tenant}\n", fakeURL)
	b.WriteString("sources:\n")
	for _, n := range []string{"a", "b", "c"} {
		fmt.Fprintf(&b, "  - table: orders_%s\n    key: id\n    destination: dest_%s\n    batch_size: 500\n    snapshot: false\n", n, n)
	}
	b.WriteString("  - table: contacts\n    key: id\n    destination: crm\n    batch_size: 100\n    snapshot: false\n    tenant: account\n    lanes: 16\n")
	path := filepath.Join(dir, "syncer-sessions.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("bench: write the configuration: %w", err)
	}
	return path, nil
}

// sessionsWriters inserts into the four tables until ctx ends: a row into
// each orders table and 20 contacts rows (tenants in turn) every 10 ms a
// writer, about 2,000 contacts rows/s over 4 writers.
func sessionsWriters(ctx context.Context, s *scratch) error {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			next := w * 50
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				b := &pgx.Batch{}
				for _, t := range []string{"orders_a", "orders_b", "orders_c"} {
					b.Queue("INSERT INTO " + pgx.Identifier{t}.Sanitize() + " (status, total) VALUES ('new', 1)")
				}
				b.Queue(`INSERT INTO contacts (account, status, total)
					SELECT 't' || ((($1::int + i) % $2::int)), 'new', i FROM generate_series(0, 19) i`, next, sessionsTenants)
				next += 20
				if err := s.pool.SendBatch(ctx, b).Close(); err != nil && ctx.Err() == nil {
					errs <- fmt.Errorf("bench: sessions writer: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// sessionPeak is the most sessions seen, each way, and what the sessions
// of the larger count had last run.
type sessionPeak struct {
	sockets, activity int
	last              string
}

func (p sessionPeak) peak() int { return max(p.sockets, p.activity) }

// sampleSessions counts the daemon's sessions every 100 ms for window,
// running load meanwhile when not nil, and returns the peak.
func sampleSessions(ctx context.Context, s *scratch, pid, dbPort int, window time.Duration, load func(context.Context) error) (sessionPeak, error) {
	var p sessionPeak
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	loadErr := make(chan error, 1)
	if load != nil {
		go func() { loadErr <- load(lctx) }()
	} else {
		loadErr <- nil
	}
	for end := time.Now().Add(window); time.Now().Before(end); {
		ports, err := daemonDBPorts(pid, dbPort)
		if err != nil {
			return p, err
		}
		rows, err := s.pool.Query(ctx, `SELECT coalesce(left(regexp_replace(query, '\s+', ' ', 'g'), 60), '') FROM pg_stat_activity
			WHERE application_name = $1 AND client_port = ANY($2)`, s.name, ports)
		if err != nil {
			return p, fmt.Errorf("bench: count sessions: %w", err)
		}
		queries, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return p, fmt.Errorf("bench: count sessions: %w", err)
		}
		p.sockets = max(p.sockets, len(ports))
		if len(queries) > p.activity {
			p.activity = len(queries)
			p.last = summarize(queries)
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	return p, <-loadErr
}

// summarize counts the queries by text.
func summarize(queries []string) string {
	n := map[string]int{}
	var order []string
	for _, q := range queries {
		if n[q] == 0 {
			order = append(order, q)
		}
		n[q]++
	}
	parts := make([]string, 0, len(order))
	for _, q := range order {
		parts = append(parts, fmt.Sprintf("%d× %q", n[q], q))
	}
	return strings.Join(parts, "; ")
}

// databasePort is the port of the run's database URL.
func (r *runner) databasePort() (int, error) {
	u, err := url.Parse(r.cfg.DatabaseURL)
	if err != nil {
		return 0, fmt.Errorf("bench: database URL: %w", err)
	}
	p := u.Port()
	if p == "" {
		return 5432, nil
	}
	return strconv.Atoi(p)
}

// daemonDBPorts returns the local ports of process pid's established TCP
// sockets to port dbPort, from /proc: the process's socket inodes, then
// the kernel's table of TCP sockets, each socket once (socketPorts).
func daemonDBPorts(pid, dbPort int) ([]int32, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, fmt.Errorf("bench: the daemon's sockets: %w", err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var tables []string
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue // no IPv6
		}
		tables = append(tables, string(data))
	}
	return socketPorts(tables, inodes, dbPort), nil
}

// socketPorts returns the local ports of the established sockets of
// tables (the text of /proc/net/tcp and tcp6) whose inode is in inodes and
// whose remote port is dbPort, each socket once.
//
// Once, because the kernel's table is not read at one instant: it comes
// in several reads, each resuming at a line's position, and sockets
// opened or closed meanwhile (the daemon's HTTP connections to the third
// party, any process's on the machine) shift the lines, so a line is
// given again or skipped. Counted by line, the daemon's 7 sessions were
// read as 14 (issue 54: "14 sockets, 7 in pg_stat_activity" for a build
// whose lanes opened about 4 times the connections to the third party);
// 7 sockets held while 500 others a second were opened and closed were
// read as 14 too.
func socketPorts(tables []string, inodes map[string]bool, dbPort int) []int32 {
	var ports []int32
	seen := map[string]bool{}
	for _, data := range tables {
		for _, line := range strings.Split(data, "\n")[1:] {
			f := strings.Fields(line)
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) < 10 || f[3] != "01" || !inodes[f[9]] || seen[f[9]] {
				continue
			}
			local, remote := hexPort(f[1]), hexPort(f[2])
			if remote == dbPort && local > 0 {
				seen[f[9]] = true
				ports = append(ports, int32(local))
			}
		}
	}
	return ports
}

// hexPort reads the port of /proc/net/tcp's "ADDR:PORT", in hex.
func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0
	}
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	if err != nil {
		return 0
	}
	return int(p)
}

// poolCount is the daemon's pool's acquires, those that waited, and their
// wait; ok is false for a daemon without these series (a release before
// issue 58's).
type poolCount struct {
	acquires, waited, seconds, opened float64
	ok                                bool
}

func poolWaits(ctx context.Context, d *daemon) poolCount {
	var c poolCount
	var err1, err2, err3, err4 error
	c.acquires, err1 = d.metric(ctx, "syncer_db_pool_acquires_total")
	c.waited, err2 = d.metric(ctx, "syncer_db_pool_acquire_waits_total")
	c.seconds, err3 = d.metric(ctx, "syncer_db_pool_acquire_wait_seconds_total")
	c.opened, err4 = d.metric(ctx, "syncer_db_pool_opened_connections_total")
	c.ok = err1 == nil && err2 == nil && err3 == nil && err4 == nil
	return c
}
