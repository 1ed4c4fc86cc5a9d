package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/jobs"
)

// The job economy scenario: a burst of inserts into an idle daemon's
// table, the River jobs it took and the time spent waiting on advisory
// locks (the recipe burst runs the same burst, syncerBurst).

// waitIdle waits up to limit until no job of resources is pending or running, so a
// burst starts from the daemon's idle state and needs at least one new job.
// It reports the jobs still there when it gave up: a daemon whose job
// lingers longer than limit starts the burst with a job running.
func (s *scratch) waitIdle(ctx context.Context, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		// The daemon's start inserts a job of resources (the relay's
		// kick), which lingers: until it is there, the daemon is not idle
		// yet, and a burst counted from after it would be taken by that
		// job and count 0 jobs.
		var states []string
		var kicked bool
		rows, err := s.pool.Query(ctx, `SELECT state::text || ' (attempt ' || attempt || ')' FROM river_job WHERE kind = $1
			AND args->>'source' = $2 AND state IN ('available', 'pending', 'scheduled', 'retryable', 'running')`,
			jobs.ExportArgs{}.Kind(), jobs.Resources)
		if err == nil {
			states, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err == nil {
			err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM river_job WHERE kind = $1 AND args->>'source' = $2)`,
				jobs.ExportArgs{}.Kind(), jobs.Resources).Scan(&kicked)
		}
		if err != nil {
			return "", fmt.Errorf("bench: wait for an idle daemon: %w", err)
		}
		if len(states) == 0 && kicked {
			return "", nil
		}
		if !kicked {
			states = []string{"no job of resources yet"}
		}
		if time.Now().After(deadline) {
			return strings.Join(states, ", "), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// idleWait is how long a burst waits for an idle daemon: longer than the
// exporter's hot and cold lingers (0.5 s + 5 s), which the start's job
// spends at every size.
func (r *runner) idleWait() time.Duration { return 8 * time.Second }

func (s *scratch) maxJobID(ctx context.Context) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM river_job`).Scan(&id)
	return id, err
}

// burstResult is a burst of single-row inserts and its export.
type burstResult struct {
	writers   writeResult
	exported  time.Duration // from the first insert until all were exported
	lockWaitS float64
	jobs      int64
}

// syncerBurst inserts n rows from the writers into an idle daemon's table
// and measures until they are exported, counting the jobs of resources it took.
func (r *runner) syncerBurst(ctx context.Context, label string, n int) (burstResult, error) {
	var res burstResult
	st, err := r.startStack(ctx, label)
	if err != nil {
		return res, err
	}
	defer st.close(ctx)
	s, f, d := st.s, st.f, st.d
	busy, err := s.waitIdle(ctx, r.idleWait())
	if err != nil {
		return res, err
	}
	if busy != "" {
		r.note("%s: the daemon was not idle %s after it started (resources' job %s); the burst began with its job running", label, r.idleWait(), busy)
	}
	before, err := s.maxJobID(ctx)
	if err != nil {
		return res, err
	}
	r.progressf("   %s: %s inserts from %d connections, daemon idle", label, count(float64(n)), r.sizes.Writers)
	if res, err = r.timeBurst(ctx, s, f, n, plainInsert); err != nil {
		return res, err
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'source' = $3 AND id > $2`,
		jobs.ExportArgs{}.Kind(), before, jobs.Resources).Scan(&res.jobs); err != nil {
		return res, fmt.Errorf("bench: count jobs: %w", err)
	}
	return res, d.stop()
}

// timeBurst writes n rows with insert from the writers into s and waits
// until f has them all, sampling the sessions' lock waits meanwhile.
func (r *runner) timeBurst(ctx context.Context, s *scratch, f *fake, n int, insert insertFunc) (burstResult, error) {
	var res burstResult
	sampler, err := r.sampleLockWaits(ctx, s.name)
	if err != nil {
		return res, err
	}
	start := time.Now()
	res.writers, err = write(ctx, s.pool, r.sizes.Writers, int64(n), 0, insert, false)
	if err != nil {
		sampler.stop()
		return res, err
	}
	end, err := s.waitDrained(ctx, f.Server, int64(n), drainLimit(n))
	res.lockWaitS = sampler.stop()
	if err != nil {
		return res, err
	}
	res.exported = end.Sub(start)
	return res, nil
}

func (r *runner) jobEconomy(ctx context.Context) ([]Row, error) {
	n := r.sizes.JobEconomyInserts
	b, err := r.syncerBurst(ctx, "job-economy", n)
	if err != nil {
		return nil, err
	}
	per10k := float64(b.jobs) * 10_000 / float64(n)
	r.jobLockWaitRow = len(r.report.Rows) + 2
	return []Row{{
		Scenario: "job economy: jobs",
		Measured: fmt.Sprintf("%d jobs for %s inserts", b.jobs, count(float64(n))),
		Baseline: "recipe: 10,000 (one per insert)",
		Figure:   fmt.Sprintf("%.1f per 10,000 inserts", per10k),
		Target:   "<= 20",
		// One job is the least any burst takes: at a tiny size it is
		// more than 20 per 10,000.
		Pass:   per10k <= 20 || b.jobs <= 1,
		Values: map[string]float64{"inserts": float64(n), "jobs": float64(b.jobs), "jobs_per_10k": per10k, "export_s": b.exported.Seconds()},
	}, {
		Scenario: "job economy: lock wait",
		Measured: fmt.Sprintf("%.2f s waiting on advisory locks", b.lockWaitS),
		Baseline: "-",
		Figure:   fmt.Sprintf("%.2f s", b.lockWaitS),
		Target:   "0 s",
		Pass:     b.lockWaitS == 0,
		Values:   map[string]float64{"lock_wait_s": b.lockWaitS},
	}}, nil
}
