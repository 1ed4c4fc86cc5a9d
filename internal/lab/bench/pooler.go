package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/lab/pgbouncer"
)

// The pooler scenario (issue 58, contract section 12, "Poolers"): one
// daemon whose DATABASE_URL goes through a PgBouncer of the bench's own in
// transaction mode (stock settings), in front of a scratch cluster
// (cluster.go), and writers inserting single rows into resources at 500 a
// second, straight to the cluster. Two modes alternated in one run, a
// daemon started afresh for each:
//
//   - no direct URL: no session state anywhere (leases, the relay polling
//     the outbox);
//   - with SYNCER_DIRECT_URL: the locks' holder and LISTEN on a direct
//     session, the baseline.
//
// Each daemon idles past its job's cold linger (5 s) before the writes,
// so its first rows wait for a new job to start, as an idle daemon's do.
// The row gives the latency from each writer's commit to the fake's
// acceptance, and the database's CPU per row (every PostgreSQL process,
// the writers' backends included, from the first insert until the last
// row is accepted) against the baseline's. Without pgbouncer the row says
// it was skipped (scripts/ensure-pgbouncer.sh installs it).

// Scenario name and row.
const (
	ScenarioPooler = "pooler"
	poolerRow      = "latency through PgBouncer transaction mode, no direct URL, 500 inserts/s"
)

// Targets: the contract's.
const (
	poolerP99Max   = 50 * time.Millisecond
	poolerCPURatio = 2.0
	poolerRate     = 500
	// poolerRole is the daemon's login role through the pooler, with the
	// settings docs/operations.md gives a role behind a transaction
	// pooler (no session setting reaches its server sessions).
	poolerRole = "syncer_bench_pooled"
)

// poolerMode is one of the two daemons' settings.
type poolerMode struct {
	direct bool
	// lat are the rows' latencies, cpu the database's CPU seconds, pgb
	// PgBouncer's, rows the rows written, over every round.
	lat           []time.Duration
	cpu, pgb      float64
	rows          int
	insertsPerSec float64
}

func (r *runner) poolerScenario(ctx context.Context) ([]Row, error) {
	if _, err := pgbouncer.Find(); errors.Is(err, pgbouncer.ErrNotInstalled) {
		return []Row{{Scenario: poolerRow, Measured: "skipped: pgbouncer not installed", Baseline: "-", Figure: "-", Target: "-", Pass: true}}, nil
	}
	rounds, writeFor, idle := 2, 10*time.Second, 7*time.Second
	if r.cfg.Size == SizeTiny {
		rounds, writeFor, idle = 1, time.Second, time.Second
	}
	r.progressf("   pooler: a scratch cluster from %s", pgBin())
	c, err := startCluster(ctx)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	cr := &runner{cfg: r.cfg, sizes: r.sizes, report: r.report}
	cr.cfg.DatabaseURL = c.url
	s, err := cr.newScratch(ctx, "pooler", false)
	if err != nil {
		return nil, err
	}
	defer s.drop(ctx)
	role := pgx.Identifier{poolerRole}.Sanitize()
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN SUPERUSER",
		"ALTER ROLE " + role + " SET search_path = " + pgx.Identifier{s.name}.Sanitize(),
		"ALTER ROLE " + role + " SET idle_in_transaction_session_timeout = '" + database.IdleInTransactionTimeoutDefault + "'",
		"ALTER ROLE " + role + " SET jit = off",
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("bench: pooler role: %w", err)
		}
	}
	pgb, err := startPgBouncer(ctx, c.port, poolerRole)
	if err != nil {
		return nil, err
	}
	defer pgb.stop()
	pooled := pgb.URL(poolerRole, "postgres")
	total := int(writeFor.Seconds() * poolerRate)
	f, err := startFake(2 * rounds * total)
	if err != nil {
		return nil, err
	}
	defer f.close()

	modes := []*poolerMode{{direct: false}, {direct: true}}
	for round := range rounds {
		for i := range modes {
			m := modes[(i+round)%2]
			r.progressf("   pooler: round %d of %d, %s: idle %s, then %d inserts/s for %s", round+1, rounds, m.name(), idle+2*time.Second, poolerRate, writeFor)
			settings := []string{"--database-url", pooled}
			if m.direct {
				settings = append(settings, "--direct-url", s.dsn)
			}
			if err := cr.poolerRound(ctx, c, pgb, s, f, m, total, idle, settings); err != nil {
				return nil, fmt.Errorf("pooler: %s: %w", m.name(), err)
			}
		}
	}
	no, with := modes[0], modes[1]
	sortDurations(no.lat)
	sortDurations(with.lat)
	us := func(m *poolerMode) float64 { return m.cpu / float64(max(m.rows, 1)) * 1e6 }
	ratio := us(no) / max(us(with), 1e-9)
	p50, p99, pmax := percentile(no.lat, 0.5), percentile(no.lat, 0.99), no.lat[len(no.lat)-1]
	r.note("pooler: PgBouncer's own CPU %.0f µs a row without a direct URL, %.0f with it; writers at %s/s and %s/s",
		no.pgb/float64(max(no.rows, 1))*1e6, with.pgb/float64(max(with.rows, 1))*1e6, count(no.insertsPerSec), count(with.insertsPerSec))
	return []Row{{
		Scenario: poolerRow,
		Measured: fmt.Sprintf("p50 %s, p99 %s, max %s; database CPU %.0f µs a row", ms(p50), ms(p99), ms(pmax), us(no)),
		Baseline: fmt.Sprintf("with SYNCER_DIRECT_URL: p50 %s, p99 %s; %.0f µs a row", ms(percentile(with.lat, 0.5)), ms(percentile(with.lat, 0.99)), us(with)),
		Figure:   fmt.Sprintf("p99 %s, CPU %.2fx", ms(p99), ratio),
		Target:   fmt.Sprintf("p99 <= %s, CPU <= %.0fx", ms(poolerP99Max), poolerCPURatio),
		Pass:     p99 <= poolerP99Max && ratio <= poolerCPURatio,
		Values: map[string]float64{
			"rows": float64(no.rows), "p50_ms": msf(p50), "p99_ms": msf(p99), "max_ms": msf(pmax),
			"direct_p50_ms": msf(percentile(with.lat, 0.5)), "direct_p99_ms": msf(percentile(with.lat, 0.99)),
			"db_cpu_us_per_row": us(no), "direct_db_cpu_us_per_row": us(with), "cpu_ratio": ratio,
		},
	}}, nil
}

func (m *poolerMode) name() string {
	if m.direct {
		return "with SYNCER_DIRECT_URL"
	}
	return "no direct URL"
}

// poolerRound starts a daemon with settings, lets it idle, writes total
// rows at poolerRate and adds what it measured to m.
func (r *runner) poolerRound(ctx context.Context, c *cluster, pgb *pgBouncer, s *scratch, f *fake, m *poolerMode, total int, idle time.Duration, settings []string) error {
	d, err := r.startDaemon(ctx, s, f, false, settings...)
	if err != nil {
		return err
	}
	defer d.stop()
	// Its start's job runs and ends (its cold linger) before the writes.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2*time.Second + idle):
	}
	cpu0, err := c.sampleCPU()
	if err != nil {
		return err
	}
	pgb0 := pgb.cpuSeconds()
	w, err := paced(ctx, s.pool, 8, total, time.Second/poolerRate, plainInsert)
	if err != nil {
		return err
	}
	if err := waitReceived(ctx, f.Server, w.ids, drainLimit(total)); err != nil {
		return fmt.Errorf("%w: %s", err, d.stderr.String())
	}
	cpu1, err := c.sampleCPU()
	if err != nil {
		return err
	}
	m.pgb += pgb.cpuSeconds() - pgb0
	if err := d.stop(); err != nil {
		return err
	}
	m.lat = append(m.lat, receiptLatencies(f, w)...)
	m.cpu += cpu1.total - cpu0.total
	m.rows += len(w.ids)
	m.insertsPerSec = w.rate()
	return nil
}
