package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The database's share (issue 57; the contract's section 12, "CPU"):
// on a scratch cluster of its own (cluster.go), 4 writers insert single
// rows into an application table at 500 and at 2,000 a second, in three
// phases alternated in one run:
//
//   - plain: the inserts alone, syncer's triggers disabled;
//   - wal: the same with a logical-decoding reader (pg_recvlogical,
//     pgoutput, a publication of the table) streaming them;
//   - syncer: the same exported by syncer, a configured source.
//
// Each phase counts every PostgreSQL process's CPU from /proc (the
// postmaster's reaped children too) from the first insert until the
// exporter has every row (the slot confirmed the writers' last LSN, or
// syncer's change table is empty), per row written; the writers'
// backends and the exporter's sessions apart (pg_stat_activity), and
// the bench's own watching session left out. pg_stat_statements, reset
// at each phase's start, gives each phase's top statements. Last, a
// drain: syncer started on 100,000 pending rows, the database's CPU
// until they are all exported.

// Scenario name and rows.
const (
	ScenarioDBShare = "dbshare"

	dbshareRow500   = "dbshare: 500/s"
	dbshareRow2000  = "dbshare: 2,000/s"
	dbshareRowDrain = "dbshare: drain"
)

// Application names that tell the sessions apart.
const (
	dbshareWriters = "dbshare-writers"
	dbshareWatch   = "dbshare-bench"
	// dbshareMark starts the bench's own statements, so that its top
	// statements leave them out.
	dbshareMark = "/* dbshare-bench */ "
	dbsharePub  = "syncer_dbshare"
	dbshareSlot = "syncer_dbshare"
)

type sharePhase string

const (
	phasePlain  sharePhase = "inserts alone"
	phaseWAL    sharePhase = "WAL reader"
	phaseSyncer sharePhase = "syncer"
	// phaseSyncerAsync is syncer with its own sessions' commits
	// asynchronous (synchronous_commit off; the writers' are not): a
	// diagnostic, run when SYNCER_BENCH_DBSHARE_ASYNC is set, of how much
	// the daemon's WAL flushes slow the writers' commits.
	phaseSyncerAsync sharePhase = "syncer, its commits asynchronous"
)

// sharePhases are the phases of a round, in order.
func sharePhases() []sharePhase {
	phases := []sharePhase{phasePlain, phaseWAL, phaseSyncer}
	if os.Getenv("SYNCER_BENCH_DBSHARE_ASYNC") != "" {
		phases = append(phases, phaseSyncerAsync)
	}
	return phases
}

// shareSizes are the scenario's amounts.
type shareSizes struct {
	phase     time.Duration // how long the writers write in a phase
	rounds    int           // alternations of the three phases at each rate
	drainRows int
	writers   int
	rates     []int
}

func (r *runner) shareSizes() shareSizes {
	if r.cfg.Size == SizeTiny {
		return shareSizes{phase: time.Second, rounds: 1, drainRows: 2_000, writers: 4, rates: []int{500, 2000}}
	}
	return shareSizes{phase: 12 * time.Second, rounds: 2, drainRows: 100_000, writers: 4, rates: []int{500, 2000}}
}

// shareCPU is the CPU seconds of one phase, by whose session spent it.
type shareCPU struct {
	total, writers, exporter, bench float64
}

// db is the database's CPU: every process but the bench's watching
// session.
func (c shareCPU) db() float64 { return c.total - c.bench }

func (c *shareCPU) add(o shareCPU) {
	c.total += o.total
	c.writers += o.writers
	c.exporter += o.exporter
	c.bench += o.bench
}

// sharePhaseResult is one phase's measure.
type sharePhaseResult struct {
	rows int64
	rate float64 // the writers' achieved inserts a second
	cpu  shareCPU
	top  []shareStmt
	// waits is what the writers' backends were doing, sampled.
	waits string
	// notifies counts the pg_notify calls of the phase's statements.
	notifies int64
	// walBytes is the WAL the cluster wrote in the phase.
	walBytes float64
}

// shareStmt is a statement of pg_stat_statements.
type shareStmt struct {
	calls   int64
	totalMS float64
	query   string
}

// shareBed is what the phases share: the cluster, the scratch schema on
// it with the source installed, the fake, the configuration, the
// writers' pool and the watching session.
type shareBed struct {
	r       *runner // a runner on the cluster
	c       *cluster
	s       *scratch
	f       *fake
	config  string
	writers *pgxpool.Pool
	watch   *pgx.Conn
	sampler *pgx.Conn // the writers' waits' (dbshare_waits.go)
	enabled bool      // syncer's triggers on orders
	dir     string
}

func (r *runner) dbshare(ctx context.Context) ([]Row, error) {
	sz := r.shareSizes()
	b, err := r.newShareBed(ctx, sz)
	if err != nil {
		return nil, err
	}
	defer b.close(ctx)
	if w := idleWindow(); w > 0 {
		if err := b.idle(ctx, w); err != nil {
			return nil, fmt.Errorf("dbshare: idle: %w", err)
		}
	}
	var rows []Row
	for _, rate := range sz.rates {
		// --rows drain runs the drain alone: a comparison of the drain's
		// cost in minutes rather than the scenario's quarter hour.
		if !r.cfg.wantsRow(shareRowName(rate)) {
			continue
		}
		res := map[sharePhase]*sharePhaseResult{}
		for round := range sz.rounds {
			for _, ph := range sharePhases() {
				r.progressf("   dbshare: %s at %d/s, round %d of %d, %s", ph, rate, round+1, sz.rounds, sz.phase)
				pr, err := b.phase(ctx, ph, rate, sz)
				if err != nil {
					return rows, fmt.Errorf("dbshare: %s at %d/s: %w", ph, rate, err)
				}
				r.note("dbshare %d/s round %d, %s: %s", rate, round+1, ph, pr.describe())
				if res[ph] == nil {
					res[ph] = &sharePhaseResult{}
				}
				acc := res[ph]
				acc.rows += pr.rows
				acc.rate += pr.rate / float64(sz.rounds)
				acc.cpu.add(pr.cpu)
				acc.top = pr.top // the last round's
			}
		}
		for _, ph := range sharePhases() {
			r.note("dbshare %d/s, %s: top statements of the last round (pg_stat_statements, calls, total ms, ms a call):\n%s", rate, ph, formatTop(res[ph].top))
		}
		rows = append(rows, shareRow(rate, res))
	}
	if !r.cfg.wantsRow(dbshareRowDrain) {
		return rows, nil
	}
	drain, err := b.drain(ctx, sz.drainRows)
	if err != nil {
		return rows, fmt.Errorf("dbshare: drain: %w", err)
	}
	r.note("dbshare drain: top statements (pg_stat_statements, calls, total ms, ms a call):\n%s", formatTop(drain.top))
	us := drain.cpu.db() / float64(drain.rows) * 1e6
	rows = append(rows, Row{
		Scenario: dbshareRowDrain,
		Measured: fmt.Sprintf("%.1f µs of database CPU a row (%s rows; syncer's sessions %.1f)", us, count(float64(drain.rows)), drain.cpu.exporter/float64(drain.rows)*1e6),
		Baseline: "-",
		Figure:   fmt.Sprintf("%.1f µs", us),
		Target:   "<= 10 µs",
		Pass:     us <= 10,
		Values:   map[string]float64{"rows": float64(drain.rows), "db_cpu_us_per_row": us, "syncer_sessions_us_per_row": drain.cpu.exporter / float64(drain.rows) * 1e6},
	})
	return rows, nil
}

// shareRow is the row of one rate: syncer's database CPU a row against
// the WAL reader's, the inserts alone beside them.
func shareRow(rate int, res map[sharePhase]*sharePhaseResult) Row {
	per := func(ph sharePhase, v float64) float64 { return v / float64(max(res[ph].rows, 1)) * 1e6 }
	plain, wal, syn := res[phasePlain], res[phaseWAL], res[phaseSyncer]
	plainUS, walUS, synUS := per(phasePlain, plain.cpu.db()), per(phaseWAL, wal.cpu.db()), per(phaseSyncer, syn.cpu.db())
	ratio := synUS / walUS
	reached := syn.rate / float64(rate)
	return Row{
		Scenario: shareRowName(rate),
		Measured: fmt.Sprintf("syncer %.0f µs a row (writers %.0f, its sessions %.0f); writers %s/s",
			synUS, per(phaseSyncer, syn.cpu.writers), per(phaseSyncer, syn.cpu.exporter), count(syn.rate)),
		Baseline: fmt.Sprintf("WAL reader %.0f (writers %.0f, walsender %.0f), %s/s; inserts alone %.0f (writers %.0f), %s/s",
			walUS, per(phaseWAL, wal.cpu.writers), per(phaseWAL, wal.cpu.exporter), count(wal.rate),
			plainUS, per(phasePlain, plain.cpu.writers), count(plain.rate)),
		Figure: fmt.Sprintf("%.2fx the WAL reader, writers %.2fx", ratio, reached),
		Target: "<= 1.20x, writers >= 0.95x",
		Pass:   ratio <= 1.2 && (reached >= 0.95 || wal.rate/float64(rate) < 0.95),
		Values: map[string]float64{
			"rate": float64(rate), "ratio": ratio,
			"syncer_us_per_row": synUS, "wal_us_per_row": walUS, "plain_us_per_row": plainUS,
			"syncer_writers_us_per_row": per(phaseSyncer, syn.cpu.writers), "syncer_sessions_us_per_row": per(phaseSyncer, syn.cpu.exporter),
			"wal_writers_us_per_row": per(phaseWAL, wal.cpu.writers), "walsender_us_per_row": per(phaseWAL, wal.cpu.exporter),
			"plain_writers_us_per_row": per(phasePlain, plain.cpu.writers),
			"syncer_rate":              syn.rate, "wal_rate": wal.rate, "plain_rate": plain.rate,
		},
	}
}

func shareRowName(rate int) string {
	if rate == 500 {
		return dbshareRow500
	}
	return dbshareRow2000
}

func (p sharePhaseResult) describe() string {
	n := float64(max(p.rows, 1))
	return fmt.Sprintf("%s rows at %s/s, database %.0f µs a row (writers %.0f, exporter %.0f, the rest %.0f); %.0f bytes of WAL a row; %d pg_notify; writers' backends: %s",
		count(float64(p.rows)), count(p.rate), p.cpu.db()/n*1e6, p.cpu.writers/n*1e6, p.cpu.exporter/n*1e6,
		(p.cpu.db()-p.cpu.writers-p.cpu.exporter)/n*1e6, p.walBytes/n, p.notifies, p.waits)
}

func formatTop(top []shareStmt) string {
	var b strings.Builder
	for _, s := range top {
		q := strings.Join(strings.Fields(s.query), " ")
		if len(q) > 110 {
			q = q[:110] + "..."
		}
		fmt.Fprintf(&b, "    %8d  %9.1f  %7.3f  %s\n", s.calls, s.totalMS, s.totalMS/float64(max(s.calls, 1)), q)
	}
	return strings.TrimRight(b.String(), "\n")
}

func (r *runner) newShareBed(ctx context.Context, sz shareSizes) (_ *shareBed, err error) {
	b := &shareBed{}
	defer func() {
		if err != nil {
			b.close(ctx)
		}
	}()
	r.progressf("   dbshare: a scratch cluster from %s", pgBin())
	if b.c, err = startCluster(ctx); err != nil {
		return nil, err
	}
	// A runner on the cluster: the scratch schema, the daemon and its
	// migrations all go there.
	b.r = &runner{cfg: r.cfg, sizes: r.sizes, report: r.report}
	b.r.cfg.DatabaseURL = b.c.url
	total := 0
	for _, rate := range sz.rates {
		total += int(float64(rate)*sz.phase.Seconds()) * sz.rounds
	}
	if b.f, err = startFake(total + sz.drainRows); err != nil {
		return nil, err
	}
	if b.dir, err = os.MkdirTemp("", "syncer-bench-"); err != nil {
		return nil, err
	}
	if b.config, err = writeSourceConfig(b.dir, []benchSource{{table: "orders", destination: "api", url: b.f.url}}); err != nil {
		return nil, err
	}
	if b.s, err = b.r.newScratch(ctx, "dbshare", false); err != nil {
		return nil, err
	}
	if err := b.s.installSources(ctx, b.config, "orders"); err != nil {
		return nil, err
	}
	b.enabled = true
	if _, err := b.s.pool.Exec(ctx, `CREATE PUBLICATION `+dbsharePub+` FOR TABLE orders`); err != nil {
		return nil, fmt.Errorf("bench: publication: %w", err)
	}
	dsn, err := appNamed(b.s.dsn, dbshareWriters)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns, pc.MinConns = int32(sz.writers), int32(sz.writers)
	if b.writers, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	if dsn, err = appNamed(b.s.dsn, dbshareWatch); err != nil {
		return nil, err
	}
	if b.watch, err = pgx.Connect(ctx, dsn); err != nil {
		return nil, err
	}
	if b.sampler, err = pgx.Connect(ctx, dsn); err != nil {
		return nil, err
	}
	return b, nil
}

// appNamed is dsn with its sessions' application_name set to name.
func appNamed(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (b *shareBed) close(ctx context.Context) {
	for _, c := range []*pgx.Conn{b.watch, b.sampler} {
		if c != nil {
			c.Close(context.WithoutCancel(ctx))
		}
	}
	if b.writers != nil {
		b.writers.Close()
	}
	if b.s != nil {
		b.s.drop(ctx)
	}
	if b.f != nil {
		b.f.close()
	}
	if b.c != nil {
		b.c.stop()
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// triggers enables or disables syncer's triggers on orders.
func (b *shareBed) triggers(ctx context.Context, on bool) error {
	if b.enabled == on {
		return nil
	}
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`ALTER TABLE orders `+verb+` TRIGGER USER`); err != nil {
		return fmt.Errorf("bench: %s triggers: %w", verb, err)
	}
	b.enabled = on
	return nil
}

// phase runs one phase: its exporter started, the writers at rate for
// sz.phase, until the exporter has every row.
func (b *shareBed) phase(ctx context.Context, ph sharePhase, rate int, sz shareSizes) (sharePhaseResult, error) {
	var res sharePhaseResult
	if err := b.triggers(ctx, ph == phaseSyncer || ph == phaseSyncerAsync); err != nil {
		return res, err
	}
	// Every phase starts from a checkpoint: one that fell in a phase
	// would charge it the others' writes.
	if _, err := b.watch.Exec(ctx, dbshareMark+`CHECKPOINT`); err != nil {
		return res, fmt.Errorf("bench: checkpoint: %w", err)
	}
	var wait func(ctx context.Context) error
	switch ph {
	case phaseWAL:
		stop, err := b.startReader(ctx)
		if err != nil {
			return res, err
		}
		defer stop()
	case phaseSyncer, phaseSyncerAsync:
		s := b.s
		if ph == phaseSyncerAsync {
			async := *b.s
			u, err := url.Parse(async.dsn)
			if err != nil {
				return res, err
			}
			q := u.Query()
			q.Set("synchronous_commit", "off")
			u.RawQuery = q.Encode()
			async.dsn = u.String()
			s = &async
		}
		d, err := b.r.startDaemon(ctx, s, b.f, false, "--config", b.config, "--thirdparty-url=")
		if err != nil {
			return res, err
		}
		defer d.stop()
		// The daemon's start is over before the writes begin.
		if err := warmUp(ctx, b.writers, b.f, insertOrder, 0); err != nil {
			return res, fmt.Errorf("%w: %s", err, d.stderr.String())
		}
		wait = func(ctx context.Context) error { return b.waitChanges(ctx, 2*time.Minute) }
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT public.pg_stat_statements_reset()`); err != nil {
		return res, err
	}
	wal0, err := b.walPosition(ctx)
	if err != nil {
		return res, err
	}
	cpu0, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	total := int(float64(rate) * sz.phase.Seconds())
	ws := sampleWaits(ctx, b.sampler)
	w, err := paced(ctx, b.writers, sz.writers, total, time.Second/time.Duration(rate), insertOrder)
	res.waits = ws.stop()
	if err != nil {
		return res, err
	}
	if ph == phaseWAL {
		wait = b.waitSlot
	}
	if wait != nil {
		if err := wait(ctx); err != nil {
			return res, err
		}
	}
	cpu1, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	wal1, err := b.walPosition(ctx)
	if err != nil {
		return res, err
	}
	res.walBytes = wal1 - wal0
	res.rows, res.rate = w.rows, w.rate()
	if res.cpu, err = b.classify(ctx, cpu0, cpu1); err != nil {
		return res, err
	}
	if res.top, err = b.topStatements(ctx); err != nil {
		return res, err
	}
	if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT COALESCE(sum(calls), 0) FROM public.pg_stat_statements
		WHERE query LIKE '%pg_notify%' AND query NOT LIKE '/* dbshare-bench */%'`).Scan(&res.notifies); err != nil {
		return res, err
	}
	return res, nil
}

// walPosition reads the cluster's WAL position, in bytes.
func (b *shareBed) walPosition(ctx context.Context) (float64, error) {
	var wal float64
	err := b.watch.QueryRow(ctx, dbshareMark+`SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&wal)
	return wal, err
}

// startReader creates the slot and starts pg_recvlogical on it, and
// waits until its walsender streams; the stop it returns ends the reader
// and drops the slot. The slot is the phase's only: one kept between
// phases would make the reader decode the other phases' WAL.
func (b *shareBed) startReader(ctx context.Context) (func(), error) {
	if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, dbshareSlot); err != nil {
		return nil, fmt.Errorf("bench: create the slot: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for range 50 {
			if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT pg_drop_replication_slot($1)`, dbshareSlot); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// -F 0: no fsync of the output, which is /dev/null, and the position
	// reported as flushed at once, every second (-s 1).
	cmd := exec.Command(filepath.Join(b.c.bin, "pg_recvlogical"),
		"-d", strings.Replace(b.c.url, "postgres://", "postgresql://", 1)+"?application_name=pg_recvlogical",
		"--slot", dbshareSlot, "--start", "-f", "/dev/null", "-F", "0", "-s", "1", "-n",
		"-o", "proto_version=1", "-o", "publication_names="+dbsharePub)
	out := &tailBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		drop()
		return nil, fmt.Errorf("bench: start pg_recvlogical: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		drop()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT active FROM pg_replication_slots WHERE slot_name = $1`, dbshareSlot).Scan(&active); err != nil {
			stop()
			return nil, fmt.Errorf("bench: read the slot: %w", err)
		}
		if active {
			return stop, nil
		}
		select {
		case <-done:
			drop()
			return nil, fmt.Errorf("bench: pg_recvlogical exited: %s", out.String())
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("bench: pg_recvlogical not streaming after 30 s: %s", out.String())
		}
	}
}

// waitSlot waits until the reader confirmed the WAL written so far.
func (b *shareBed) waitSlot(ctx context.Context) error {
	var lsn string
	if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var done bool
		if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, dbshareSlot, lsn).Scan(&done); err != nil {
			return fmt.Errorf("bench: read the slot: %w", err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the WAL reader did not confirm %s in a minute", lsn)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitChanges waits until syncer's change table is empty: every row
// exported and marked.
func (b *shareBed) waitChanges(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var left bool
		if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT EXISTS (SELECT FROM syncer_changes)`).Scan(&left); err != nil {
			return err
		}
		if !left {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: changes still pending after %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// classify splits the CPU between two samples by the sessions'
// application names: the writers', the exporter's (syncer's sessions
// carry the scratch schema's name, the reader's walsender is one), the
// bench's watching session.
func (b *shareBed) classify(ctx context.Context, s0, s1 cpuSample) (shareCPU, error) {
	c := shareCPU{total: s1.total - s0.total}
	rows, err := b.watch.Query(ctx, dbshareMark+`SELECT pid, application_name, backend_type FROM pg_stat_activity`)
	if err != nil {
		return c, err
	}
	type sess struct {
		pid       int
		app, kind string
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sess, error) {
		var s sess
		var app, kind *string
		err := row.Scan(&s.pid, &app, &kind)
		if app != nil {
			s.app = *app
		}
		if kind != nil {
			s.kind = *kind
		}
		return s, err
	})
	if err != nil {
		return c, err
	}
	for _, s := range all {
		used := s1.byPID[s.pid] - s0.byPID[s.pid]
		switch {
		case s.app == dbshareWriters:
			c.writers += used
		case s.app == dbshareWatch:
			c.bench += used
		case s.app == b.s.name || s.kind == "walsender":
			c.exporter += used
		}
	}
	return c, nil
}

// topStatements reads the phase's costliest statements but the bench's.
func (b *shareBed) topStatements(ctx context.Context) ([]shareStmt, error) {
	rows, err := b.watch.Query(ctx, dbshareMark+`SELECT calls, total_exec_time, query FROM public.pg_stat_statements
		WHERE query NOT LIKE '/* dbshare-bench */%' ORDER BY total_exec_time DESC LIMIT 8`)
	if err != nil {
		return nil, fmt.Errorf("bench: pg_stat_statements: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (shareStmt, error) {
		var s shareStmt
		err := row.Scan(&s.calls, &s.totalMS, &s.query)
		return s, err
	})
}

// drain: n pending changes, written with the daemon stopped, then the
// daemon started and the database's CPU until they are all exported.
func (b *shareBed) drain(ctx context.Context, n int) (sharePhaseResult, error) {
	var res sharePhaseResult
	if err := b.triggers(ctx, true); err != nil {
		return res, err
	}
	b.r.progressf("   dbshare: drain of %s rows", count(float64(n)))
	if err := b.s.preloadOrders(ctx, "orders", n); err != nil {
		return res, err
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`CHECKPOINT`); err != nil {
		return res, err
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT public.pg_stat_statements_reset()`); err != nil {
		return res, err
	}
	cpu0, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	d, err := b.r.startDaemon(ctx, b.s, b.f, false, "--config", b.config, "--thirdparty-url=")
	if err != nil {
		return res, err
	}
	defer d.stop()
	if err := b.waitChanges(ctx, drainLimit(n)); err != nil {
		return res, fmt.Errorf("%w: %s", err, d.stderr.String())
	}
	cpu1, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	res.rows = int64(n)
	if res.cpu, err = b.classify(ctx, cpu0, cpu1); err != nil {
		return res, err
	}
	if res.top, err = b.topStatements(ctx); err != nil {
		return res, err
	}
	return res, nil
}
