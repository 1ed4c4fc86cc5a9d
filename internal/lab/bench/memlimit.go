package bench

import (
	"context"
	"fmt"
	"strings"
)

// The memory-limit scenario: what the daemon's memory limit costs and
// saves while it drains, with small and large payloads. `syncer run` used
// to set a soft limit of 16 MiB (or ten batches, if larger); now it sets
// none unless GOMEMLIMIT or a container's limit says so. Each row drains
// the same rows twice in the same run, with that old limit (GOMEMLIMIT, the
// baseline) and with what `syncer run` does by default, and compares peak
// RSS, CPU time and garbage collections.
const (
	memoryLimitRow300 = "memory limit (300 B)"
	memoryLimitRow8K  = "memory limit (8 KiB)"
)

// oldMemoryLimit is the limit `syncer run` set before, at the bench's batch
// size: max(16 MiB, 10 x min(batch max bytes, batch size x 2 KiB)).
func (r *runner) oldMemoryLimit() int64 {
	return max(16<<20, 10*min(4<<20, int64(r.sizes.BatchSize)*2048))
}

// payload8KSQL builds an 8 KiB JSON object for row i.
const payload8KSQL = `jsonb_build_object('id', i, 'kind', 'bench', 'data', repeat(md5(i::text), 255))`

// memoryDrain is one drain's cost.
type memoryDrain struct {
	peakRSS int64
	cpu     float64
	gcs     float64
	rate    float64
}

// memoryDrainOnce preloads n rows built by payload with no daemon running,
// then drains them with a daemon started with env.
func (r *runner) memoryDrainOnce(ctx context.Context, label, payload string, n int, env []string) (memoryDrain, error) {
	var res memoryDrain
	s, err := r.newScratch(ctx, label, false)
	if err != nil {
		return res, err
	}
	defer s.drop(ctx)
	if _, err := s.pool.Exec(ctx, `INSERT INTO resources (payload) SELECT `+payload+` FROM generate_series(1, $1) i`, n); err != nil {
		return res, fmt.Errorf("bench: preload %d rows: %w", n, err)
	}
	if _, err := s.pool.Exec(ctx, `VACUUM (ANALYZE) resources`); err != nil {
		return res, fmt.Errorf("bench: vacuum: %w", err)
	}
	f, err := startFake(n)
	if err != nil {
		return res, err
	}
	defer f.close()
	d, err := r.startDaemon(ctx, s, f, false, env...)
	if err != nil {
		return res, err
	}
	defer d.stop()
	end, err := s.waitDrained(ctx, f.Server, int64(n), drainLimit(n))
	if err != nil {
		return res, err
	}
	start := d.started
	if first := f.Stats().FirstRequestAt; first.After(start) {
		start = first
	}
	res.rate = float64(n) / end.Sub(start).Seconds()
	if res.peakRSS, err = d.peakRSS(); err != nil {
		return res, err
	}
	if res.cpu, err = d.cpuSeconds(); err != nil {
		return res, err
	}
	if res.gcs, err = d.metric(ctx, "go_gc_duration_seconds_count"); err != nil {
		return res, err
	}
	return res, d.stop()
}

// memoryLimit measures both payload sizes.
func (r *runner) memoryLimit(ctx context.Context) ([]Row, error) {
	var rows []Row
	for _, c := range []struct {
		row, label, payload string
		n                   int
	}{
		{memoryLimitRow300, "memlimit-300", payloadSQL, r.sizes.MemLimitRows300},
		{memoryLimitRow8K, "memlimit-8k", payload8KSQL, r.sizes.MemLimitRows8K},
	} {
		row, err := r.memoryLimitRow(ctx, c.row, c.label, c.payload, c.n)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// memoryLimitRow alternates the old limit and the default, repeats times
// each, and compares their medians.
func (r *runner) memoryLimitRow(ctx context.Context, name, label, payload string, n int) (Row, error) {
	old := r.oldMemoryLimit()
	oldEnv := []string{fmt.Sprintf("GOMEMLIMIT=%d", old), "AUTOMEMLIMIT"}
	// The default: what `syncer run` does with nothing set, whatever the
	// bench's own environment says.
	defEnv := []string{"GOMEMLIMIT", "AUTOMEMLIMIT"}
	var base, def []memoryDrain
	for i := range r.sizes.DrainRepeats {
		r.progressf("   %s %d/%d: %s rows, %s limit", label, i+1, r.sizes.DrainRepeats, count(float64(n)), mib(old))
		b, err := r.memoryDrainOnce(ctx, label, payload, n, oldEnv)
		if err != nil {
			return Row{}, err
		}
		base = append(base, b)
		r.progressf("   %s %d/%d: %s rows, default", label, i+1, r.sizes.DrainRepeats, count(float64(n)))
		d, err := r.memoryDrainOnce(ctx, label, payload, n, defEnv)
		if err != nil {
			return Row{}, err
		}
		def = append(def, d)
	}
	b, d := medianDrain(base), medianDrain(def)
	cpuRatio := d.cpu / max(b.cpu, 1e-9)
	rssRatio := float64(d.peakRSS) / float64(max(b.peakRSS, 1))
	return Row{
		Scenario: name,
		Measured: fmt.Sprintf("default (no limit): peak RSS %s, CPU %.2f s, %.0f GCs (%s rows)", mib(d.peakRSS), d.cpu, d.gcs, count(float64(n))),
		Baseline: fmt.Sprintf("%s limit: peak RSS %s, CPU %.2f s, %.0f GCs", mib(old), mib(b.peakRSS), b.cpu, b.gcs),
		Figure:   fmt.Sprintf("CPU %.2fx, RSS %.2fx", cpuRatio, rssRatio),
		Target:   "CPU <= 1.10x of the limit's",
		Pass:     cpuRatio <= 1.10,
		Values: map[string]float64{
			"rows": float64(n), "repeats": float64(len(def)),
			"peak_rss_bytes": float64(d.peakRSS), "cpu_s": d.cpu, "gcs": d.gcs, "rows_per_s": d.rate,
			"limit_bytes": float64(old), "limit_peak_rss_bytes": float64(b.peakRSS), "limit_cpu_s": b.cpu,
			"limit_gcs": b.gcs, "limit_rows_per_s": b.rate, "cpu_ratio": cpuRatio, "rss_ratio": rssRatio,
		},
	}, nil
}

// medianDrain takes the median of each figure on its own.
func medianDrain(ds []memoryDrain) memoryDrain {
	var rss, cpu, gcs, rate []float64
	for _, d := range ds {
		rss = append(rss, float64(d.peakRSS))
		cpu = append(cpu, d.cpu)
		gcs = append(gcs, d.gcs)
		rate = append(rate, d.rate)
	}
	return memoryDrain{peakRSS: int64(median(rss)), cpu: median(cpu), gcs: median(gcs), rate: median(rate)}
}

// mergeEnv returns base changed by changes: "K=V" sets K, a bare "K"
// removes it.
func mergeEnv(base, changes []string) []string {
	drop := map[string]bool{}
	for _, c := range changes {
		k, _, _ := strings.Cut(c, "=")
		drop[k] = true
	}
	var out []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	for _, c := range changes {
		if strings.Contains(c, "=") {
			out = append(out, c)
		}
	}
	return out
}
