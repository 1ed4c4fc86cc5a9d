package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
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
	planMS  float64 // planning, beside totalMS's execution
	rows    int64
	query   string
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
		if len(q) > 160 {
			q = q[:160] + "..."
		}
		fmt.Fprintf(&b, "    %8d  %9.1f  %7.3f  plan %7.3f  rows %7d  %s\n", s.calls, s.totalMS, s.totalMS/float64(max(s.calls, 1)), s.planMS/float64(max(s.calls, 1)), s.rows, q)
	}
	return strings.TrimRight(b.String(), "\n")
}
