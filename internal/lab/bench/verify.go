package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// ScenarioVerify measures `syncer verify` (issue 44) against the drain of
// the same rows in the same run: a verify of every synced row against the
// fake (500 ids a lookup), its rate and PostgreSQL's CPU a row against the
// drain's, and what background verification at a verify_every sized for
// a million rows a day costs a daemon otherwise idle.
const ScenarioVerify = "verify"

// The verify scenario's rows.
const (
	verifyRowRate = "verify"
	verifyRowPG   = "verify: PostgreSQL CPU"
	verifyRowIdle = "verify: background, idle daemon"
)

// verifyRows are its row names, in order.
var verifyRows = []string{verifyRowRate, verifyRowPG, verifyRowIdle}

// The background row's reference: a table of a million rows verified
// once a day, 500 ids a lookup.
const (
	verifyRefRows  = 1_000_000
	verifyRefEvery = 24 * time.Hour
	verifyLookup   = 500
	// verifyDeletedEvery: one row in this many is deleted before the
	// drain, and read back from the story by the verify.
	verifyDeletedEvery = 10
)

// verifySizes are the rows verified and the window the idle daemon's CPU
// is read over.
func (r *runner) verifySizes() (rows int, window time.Duration) {
	if r.cfg.Size == SizeTiny {
		return 2_000, 5 * time.Second
	}
	return 100_000, 60 * time.Second
}

// everyFor is the verify_every that, for rows rows, spreads pages as a
// verify_every of verifyRefEvery spreads verifyRefRows' (the daemon
// spreads a run's pages over half its period): the same lookups a minute
// as the reference table, so the window sees what a day of it costs.
func everyFor(rows int) time.Duration {
	pages := float64(rows/verifyLookup + 1)
	refPages := float64(verifyRefRows/verifyLookup + 1)
	return max(time.Duration(float64(verifyRefEvery)*pages/refPages), time.Minute).Round(time.Second)
}

func (r *runner) verifyScenario(ctx context.Context) ([]Row, error) {
	n, window := r.verifySizes()
	s, err := r.newScratch(ctx, "verify", false)
	if err != nil {
		return nil, err
	}
	defer s.drop(ctx)
	if err := s.preload(ctx, n); err != nil {
		return nil, err
	}
	// A tenth of the rows deleted before the drain: their tombstones go
	// with it (n items in all), and are purged after it, as their
	// retention would, so the verify reads those keys back from the
	// row's story (issue 54: zombies of hard deletes).
	deleted := n / verifyDeletedEvery
	if err := s.exec(ctx, "delete a tenth", `DELETE FROM resources WHERE id % $1 = 0`, verifyDeletedEvery); err != nil {
		return nil, err
	}
	f, err := startFakeWith(fakethirdparty.Config{ExpectedItems: n, Lookup: true})
	if err != nil {
		return nil, err
	}
	defer f.close()

	// The drain, the baseline: its rows a second and PostgreSQL's CPU a
	// row exported.
	r.progressf("   verify: draining %s rows (the baseline)", count(float64(n)))
	d, err := r.startDaemon(ctx, s, f, false)
	if err != nil {
		return nil, err
	}
	db0, start := s.backendsCPU(ctx), time.Now()
	end, err := s.waitDrained(ctx, f.Server, int64(n), drainLimit(n))
	db1 := s.backendsCPU(ctx)
	if err != nil {
		d.stop()
		return nil, err
	}
	if err := d.stop(); err != nil {
		return nil, err
	}
	drainRate := float64(n) / end.Sub(start).Seconds()
	drainPG := db1.since(db0) / float64(n)
	if err := s.exec(ctx, "purge the tombstones", `DELETE FROM syncer_tombstones`); err != nil {
		return nil, err
	}
	// A hundredth of the deleted keys held again there: zombies.
	zombies := fakethirdparty.Drift{Recreate: map[string]json.RawMessage{}}
	for i := range deleted / 100 {
		zombies.Recreate[strconv.Itoa((i+1)*verifyDeletedEvery)] = json.RawMessage(`{"zombie": true}`)
	}
	f.ApplyDrift(zombies)

	// The verify, as `syncer verify` runs it, in this process: on the
	// scratch's pool, whose sessions stay open, so PostgreSQL's CPU is
	// read with the backends that spent it still there (a process of its
	// own would take its backends' CPU with it when it exits).
	r.progressf("   verify: syncer verify of %s rows, %d ids a lookup", count(float64(n)), verifyLookup)
	src, err := verify.NewResources(verify.Range{})
	if err != nil {
		return nil, err
	}
	if err := s.pool.Ping(ctx); err != nil {
		return nil, err
	}
	client, err := verify.NewClient(f.url, "")
	if err != nil {
		return nil, err
	}
	defer client.Close()
	db0, start = s.backendsCPU(ctx), time.Now()
	res, err := verify.Run(ctx, s.pool, src, syncer.NewReader(client), &verify.Config{LookupSize: verifyLookup})
	took := time.Since(start)
	db1 = s.backendsCPU(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: verify: %w", err)
	}
	z := int64(len(zombies.Recreate))
	if res.Checked != int64(n) || res.OK != int64(n)-z || res.Zombie != z {
		return nil, fmt.Errorf("bench: verify checked %d keys, %d ok, %d zombie, of %d keys drained (%d deleted, %d zombies)", res.Checked, res.OK, res.Zombie, n, deleted, z)
	}
	verifyRate := float64(n) / took.Seconds()
	verifyPG := db1.since(db0) / float64(n)

	// The daemon again, every row synced, verifying in the background at
	// the reference's pace: its CPU over the window.
	every := everyFor(n)
	r.progressf("   verify: idle daemon with --verify-every %s (%s rows as a million a day), %s window", every, count(float64(n)), window)
	// The verify above is the source's last run: forgotten, so the daemon
	// starts its own at once, as it would a period later.
	if err := s.exec(ctx, "forget the last verify", `DELETE FROM syncer_verify_last`); err != nil {
		return nil, err
	}
	lookups0 := len(f.Lookups())
	d, err = r.startDaemon(ctx, s, f, false, "--verify-every", every.String())
	if err != nil {
		return nil, err
	}
	defer d.stop()
	select {
	case <-time.After(time.Second): // past the start's own work
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	cpu0, err := d.cpuSeconds()
	if err != nil {
		return nil, err
	}
	w0 := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	cpu1, err := d.cpuSeconds()
	if err != nil {
		return nil, err
	}
	share := (cpu1 - cpu0) / time.Since(w0).Seconds()
	lookups := len(f.Lookups()) - lookups0
	if err := d.stop(); err != nil {
		return nil, err
	}

	rateRatio := verifyRate / drainRate
	pgRatio := verifyPG / max(drainPG, 1e-12)
	return []Row{{
		Scenario: verifyRowRate,
		Measured: fmt.Sprintf("%s keys/s (%s keys, %s of them deleted and read back from the story, %d zombies; %d ids a lookup)", count(verifyRate), count(float64(n)), count(float64(deleted)), z, verifyLookup),
		Baseline: fmt.Sprintf("drain of the same rows %s rows/s", count(drainRate)),
		Figure:   fmt.Sprintf("%.2fx", rateRatio),
		Target:   ">= 0.50x",
		Pass:     rateRatio >= 0.5,
		Values:   map[string]float64{"rows": float64(n), "deleted": float64(deleted), "zombies": float64(z), "rows_per_s": verifyRate, "drain_rows_per_s": drainRate, "ratio": rateRatio},
	}, {
		Scenario: verifyRowPG,
		Measured: fmt.Sprintf("%.1f µs a row verified", verifyPG*1e6),
		Baseline: fmt.Sprintf("%.1f µs a row exported", drainPG*1e6),
		Figure:   fmt.Sprintf("%.2fx", pgRatio),
		Target:   "<= 1.00x",
		Pass:     pgRatio <= 1,
		Values:   map[string]float64{"verify_pg_cpu_s_per_row": verifyPG, "drain_pg_cpu_s_per_row": drainPG, "ratio": pgRatio},
	}, {
		Scenario: verifyRowIdle,
		Measured: fmt.Sprintf("%.2f%% of a core (%d lookups in %s, --verify-every %s)", 100*share, lookups, window, every),
		Baseline: fmt.Sprintf("a million rows verified a day: %d lookups a minute", int(float64(verifyRefRows/verifyLookup)/verifyRefEvery.Minutes()*2+0.5)),
		Figure:   fmt.Sprintf("%.2f%%", 100*share),
		Target:   "<= 5% of a core",
		Pass:     share <= 0.05,
		Values:   map[string]float64{"core_share": share, "lookups": float64(lookups), "window_s": window.Seconds(), "verify_every_s": every.Seconds()},
	}}, nil
}

// backendCPU is the CPU seconds of each PostgreSQL backend, by pid.
type backendCPU map[int]float64

// since is the CPU the backends spent after prev was read: a backend
// that started meanwhile counts whole.
func (b backendCPU) since(prev backendCPU) float64 {
	var sum float64
	for pid, cpu := range b {
		sum += cpu - prev[pid]
	}
	return sum
}

// backendsCPU reads the CPU of the scratch's sessions (tagged with its
// name, the daemon's among them): the database is shared with whatever
// else runs on this machine, whose backends come and go, so the sum of
// every postgres process would say as much about them as about this run.
func (s *scratch) backendsCPU(ctx context.Context) backendCPU {
	out := backendCPU{}
	rows, err := s.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, s.name)
	if err != nil {
		return out
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return out
	}
	for _, pid := range pids {
		if cpu, err := procCPUSeconds(strconv.Itoa(int(pid))); err == nil {
			out[int(pid)] = cpu
		}
	}
	return out
}
