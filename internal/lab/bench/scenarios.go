package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// drainLimit bounds a wait for a drain of n rows: generous, so a slow
// machine reports a slow figure rather than an error.
func drainLimit(n int) time.Duration { return 2*time.Minute + time.Duration(n)*time.Millisecond }

// dbDrainProcedure is the database's own bound on draining: the same reads
// and marks the exporter does (500 pending rows by keyset on the pending
// index, then one UPDATE ... FROM unnest like resources.MarkSynced), with a
// COMMIT per batch, and no network, no client and no third party.
const dbDrainProcedure = `CREATE PROCEDURE bench_db_drain(batch int) LANGUAGE plpgsql AS $$
DECLARE
    last     bigint := 0;
    ids      bigint[];
    versions bigint[];
    payloads jsonb[];
BEGIN
    LOOP
        SELECT array_agg(id ORDER BY id), array_agg(version ORDER BY id), array_agg(payload ORDER BY id)
          INTO ids, versions, payloads
          FROM (SELECT id, version, payload FROM resources
                 WHERE synced_at IS NULL AND failed_at IS NULL AND id > last
                 ORDER BY id LIMIT batch) b;
        EXIT WHEN ids IS NULL;
        UPDATE resources r SET synced_at = now(), failed_at = NULL, sync_error = NULL
          FROM unnest(ids, versions) AS b(id, version)
         WHERE r.id = b.id AND r.version = b.version;
        last := ids[cardinality(ids)];
        COMMIT;
    END LOOP;
END
$$`

// dbDrainRate measures the database's bound on a fresh table of n rows.
func (r *runner) dbDrainRate(ctx context.Context, n int) (float64, error) {
	s, err := r.newScratch(ctx, "drain-db", false)
	if err != nil {
		return 0, err
	}
	defer s.drop(ctx)
	if err := s.preload(ctx, n); err != nil {
		return 0, err
	}
	if _, err := s.pool.Exec(ctx, dbDrainProcedure); err != nil {
		return 0, fmt.Errorf("bench: create the drain procedure: %w", err)
	}
	start := time.Now()
	if _, err := s.pool.Exec(ctx, fmt.Sprintf("CALL bench_db_drain(%d)", r.sizes.BatchSize)); err != nil {
		return 0, fmt.Errorf("bench: run the drain procedure: %w", err)
	}
	took := time.Since(start)
	if pending, err := s.anyPending(ctx); err != nil || pending {
		return 0, fmt.Errorf("bench: the drain procedure left rows pending (%v)", err)
	}
	return float64(n) / took.Seconds(), nil
}

// drainResult is one drain of pre-inserted rows by the daemon.
type drainResult struct {
	rate    float64
	took    time.Duration
	peakRSS int64
	// cpu is the daemon's CPU time; push the time its pushes took (HTTP
	// round trips to the fake, which decodes and records each batch).
	cpu, push float64
	// alloc is what the daemon allocated from its start (Go's own count,
	// not sampled), gcs its collections: the collector's work follows
	// them, and neither moves with the machine's load as time does.
	alloc, gcs float64
	// pool is what the daemon's pool's acquires waited (issue 58).
	pool poolCount
}

// syncerDrain pre-inserts n rows with no daemon running, starts the daemon
// and measures until the table is drained. profile, if set, is where a CPU
// profile of the daemon is saved.
func (r *runner) syncerDrain(ctx context.Context, label string, n int, profile string) (drainResult, error) {
	return r.syncerDrainIn(ctx, label, n, profile, "", nil)
}

// syncerDrainIn is syncerDrain with the fake speaking fakeFormat ("" for
// syncer's own) and the daemon given settings(fake) besides its defaults.
func (r *runner) syncerDrainIn(ctx context.Context, label string, n int, profile, fakeFormat string, settings func(f *fake) []string) (drainResult, error) {
	var res drainResult
	s, err := r.newScratch(ctx, label, false)
	if err != nil {
		return res, err
	}
	defer s.drop(ctx)
	r.progressf("   %s: inserting %s rows", label, count(float64(n)))
	if err := s.preload(ctx, n); err != nil {
		return res, err
	}
	f, err := startFakeWith(fakethirdparty.Config{ExpectedItems: n, Format: fakeFormat})
	if err != nil {
		return res, err
	}
	defer f.close()
	r.progressf("   %s: daemon draining", label)
	var extra []string
	if settings != nil {
		extra = settings(f)
	}
	d, err := r.startDaemon(ctx, s, f, profile != "", extra...)
	if err != nil {
		return res, err
	}
	defer d.stop()
	profErr := make(chan error, 1)
	heapErr := make(chan error, 1)
	if profile != "" {
		go func() { profErr <- d.profile(ctx, 10, profile) }()
		// What the daemon holds in the middle of its drain: the live
		// heap that the collector's target multiplies into its peak.
		go func() {
			select {
			case <-time.After(4 * time.Second):
				heapErr <- d.savePprof(ctx, "heap", filepath.Join(filepath.Dir(profile), "drain.heap.pprof"))
			case <-ctx.Done():
				heapErr <- ctx.Err()
			}
		}()
	}
	end, err := s.waitDrained(ctx, f.Server, int64(n), drainLimit(n))
	if err != nil {
		return res, err
	}
	// The drain starts with the first batch, not the process: starting a
	// daemon is not draining, and at 200,000 rows it would weigh ~10%.
	start := d.started
	if first := f.Stats().FirstRequestAt; first.After(start) {
		start = first
	}
	res.took = end.Sub(start)
	res.rate = float64(n) / res.took.Seconds()
	if profile != "" {
		if err := <-profErr; err != nil {
			r.note("cpu profile not saved: %v", err)
		} else {
			r.note("cpu profile of the daemon's drain (10 s from its start): %s; read it with `go tool pprof -top %s`", profile, profile)
		}
		if err := <-heapErr; err != nil {
			r.note("heap profile not saved: %v", err)
		}
		// What the drain allocated (sampled from the start), for the
		// collector's share of the profile.
		allocs := filepath.Join(filepath.Dir(profile), "drain.allocs.pprof")
		if err := d.savePprof(ctx, "allocs", allocs); err != nil {
			r.note("allocation profile not saved: %v", err)
		}
	}
	if res.peakRSS, err = d.peakRSS(); err != nil {
		return res, err
	}
	if res.cpu, err = d.cpuSeconds(); err != nil {
		return res, err
	}
	if res.push, err = d.metric(ctx, "syncer_push_duration_seconds_sum"); err != nil {
		return res, err
	}
	if res.alloc, err = d.metric(ctx, "go_memstats_alloc_bytes_total"); err != nil {
		return res, err
	}
	if res.gcs, err = d.metric(ctx, "go_gc_duration_seconds_count"); err != nil {
		return res, err
	}
	if dup := f.Stats().DuplicatePairs; dup > 0 {
		r.note("%s: the fake saw %d duplicate deliveries", label, dup)
	}
	res.pool = poolWaits(ctx, d)
	return res, d.stop()
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return ys[len(ys)/2]
}

// alternate runs the database's bound and the daemon's drain one after the
// other DrainRepeats times and returns each one's median rate: the machine
// is shared and both drift from run to run, so a single run of each would
// compare two moments rather than two programs. i counts the repeats.
func (r *runner) alternate(bound, drain func(i int) (float64, error)) (dbRate, rate float64, err error) {
	var dbRates, rates []float64
	for i := range r.sizes.DrainRepeats {
		one, err := bound(i)
		if err != nil {
			return 0, 0, err
		}
		dbRates = append(dbRates, one)
		if one, err = drain(i); err != nil {
			return 0, 0, err
		}
		rates = append(rates, one)
	}
	return median(dbRates), median(rates), nil
}

func (r *runner) drain(ctx context.Context) ([]Row, error) {
	n := r.sizes.DrainRows
	var profile string
	if r.cfg.ProfileDir != "" {
		profile = filepath.Join(r.cfg.ProfileDir, "drain.cpu.pprof")
	}
	var res drainResult
	dbRate, rate, err := r.alternate(func(i int) (float64, error) {
		if r.cfg.DaemonOnly {
			return 0, nil
		}
		r.progressf("   database bound %d/%d: %s rows, plpgsql loop", i+1, r.sizes.DrainRepeats, count(float64(n)))
		return r.dbDrainRate(ctx, n)
	}, func(i int) (float64, error) {
		one, err := r.syncerDrain(ctx, "drain", n, profile)
		profile = ""
		if i == 0 {
			res = one
		}
		return one.rate, err
	})
	if err != nil {
		return nil, err
	}
	res.rate = rate
	r.syncerDrainRate = res.rate
	r.note("drain (first run): the daemon used %.1f s of CPU in %.1f s (%.0f%% of one core); its pushes to the fake took %.1f s (%.0f%% of the drain)",
		res.cpu, res.took.Seconds(), 100*res.cpu/res.took.Seconds(), res.push, 100*res.push/res.took.Seconds())
	if res.pool.ok {
		r.note("drain (first run): the pool's acquires waited for a connection %.0f times of %.0f, %.2f s in all",
			res.pool.waited, res.pool.acquires, res.pool.seconds)
	}
	var ratio float64
	if dbRate > 0 {
		ratio = res.rate / dbRate
	}
	return []Row{{
		Scenario: "drain",
		Measured: fmt.Sprintf("%s rows/s (%s rows, median of %d)", count(res.rate), count(float64(n)), r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("database bound %s rows/s (median of %d)", count(dbRate), r.sizes.DrainRepeats),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.60x",
		Pass:     ratio >= 0.6,
		Values: map[string]float64{"rows": float64(n), "rows_per_s": res.rate, "db_rows_per_s": dbRate, "ratio": ratio, "peak_rss_bytes": float64(res.peakRSS), "daemon_cpu_s": res.cpu, "push_s": res.push,
			"alloc_bytes_per_row": res.alloc / float64(n), "gc_cycles": res.gcs},
	}}, nil
}

func (r *runner) latency(ctx context.Context) ([]Row, error) {
	st, err := r.startStack(ctx, "latency")
	if err != nil {
		return nil, err
	}
	defer st.close(ctx)
	s, f, d := st.s, st.f, st.d

	total := int(float64(r.sizes.LatencyRate) * r.sizes.LatencyFor.Seconds())
	r.progressf("   %d inserts/s for %s from %d connections", r.sizes.LatencyRate, r.sizes.LatencyFor, r.sizes.Writers)
	w, err := paced(ctx, s.pool, r.sizes.Writers, total, time.Second/time.Duration(r.sizes.LatencyRate), plainInsert)
	if err != nil {
		return nil, err
	}
	if _, err := s.waitDrained(ctx, f.Server, int64(total), drainLimit(total)); err != nil {
		return nil, err
	}
	if err := d.stop(); err != nil {
		return nil, err
	}
	received := map[int64]time.Time{}
	for _, dl := range f.Deliveries() {
		if _, ok := received[dl.ID]; !ok {
			received[dl.ID] = dl.At
		}
	}
	lat := make([]time.Duration, 0, len(w.ids))
	first := slices.MinFunc(w.commits, time.Time.Compare)
	var slow int
	var worst time.Duration
	var worstAt time.Time
	for i, id := range w.ids {
		at, ok := received[id]
		if !ok {
			return nil, fmt.Errorf("bench: row %d was never delivered", id)
		}
		// The daemon can see a commit before the writer's Exec returns.
		l := max(at.Sub(w.commits[i]), 0)
		lat = append(lat, l)
		if l > 100*time.Millisecond {
			slow++
		}
		if l > worst {
			worst, worstAt = l, w.commits[i]
		}
	}
	if slow > 0 {
		r.note("latency: %d rows took over 100 ms; the slowest (%s) was committed %.1f s into the run", slow, ms(worst), worstAt.Sub(first).Seconds())
	}
	sortDurations(lat)
	sortDurations(w.rtt)
	p50, p99, pmax := percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	return []Row{{
		Scenario: "latency",
		Measured: fmt.Sprintf("p50 %s, p99 %s, max %s (%s rows at %s/s)", ms(p50), ms(p99), ms(pmax), count(float64(len(lat))), count(w.rate())),
		Baseline: fmt.Sprintf("insert round trip p50 %s, p99 %s", ms(percentile(w.rtt, 0.5)), ms(percentile(w.rtt, 0.99))),
		Figure:   fmt.Sprintf("p50 %s, p99 %s", ms(p50), ms(p99)),
		Target:   "p50 <= 10 ms, p99 <= 50 ms",
		Pass:     p50 <= 10*time.Millisecond && p99 <= 50*time.Millisecond,
		Values: map[string]float64{
			"rows": float64(len(lat)), "inserts_per_s": w.rate(),
			"p50_ms": msf(p50), "p99_ms": msf(p99), "max_ms": msf(pmax),
			"insert_p50_ms": msf(percentile(w.rtt, 0.5)), "insert_p99_ms": msf(percentile(w.rtt, 0.99)),
		},
	}}, nil
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writerOverhead measures what syncer costs the application's writers, in
// two rows, with issue 32's targets (0.85x, 0.75x). The first is about
// the triggers: 8 writers with syncer's
// triggers, the gate shut as a draining daemon keeps it while writes flow,
// against the same table without triggers. The second row is everything at
// once on this 2-core machine: the same writers while the daemon runs and
// marks every row they insert (an UPDATE per row that the plain table never
// gets, on the same two cores).
func (r *runner) writerOverhead(ctx context.Context) ([]Row, error) {
	dur, writers := r.sizes.OverheadFor, r.sizes.Writers
	plain, err := r.newScratch(ctx, "overhead-plain", true)
	if err != nil {
		return nil, err
	}
	defer plain.drop(ctx)
	shut, err := r.newScratch(ctx, "overhead-triggers", false)
	if err != nil {
		return nil, err
	}
	defer shut.drop(ctx)
	if _, err := shut.pool.Exec(ctx, `UPDATE syncer_gate SET armed = false`); err != nil {
		return nil, err
	}
	// Alternated, as the source writers are: one run of each, one after
	// the other, moved by 0.1x from run to run on this machine (a stall of
	// its disk, the tables' growth), more than the triggers' own cost.
	var base, trig writeResult
	for i := range r.sourceSizes().repeats {
		r.progressf("   plain %d: %d writers for %s, no triggers, no daemon", i+1, writers, dur)
		w, err := write(ctx, plain.pool, writers, 0, dur, plainInsert, false)
		if err != nil {
			return nil, err
		}
		base.rows, base.took = base.rows+w.rows, base.took+w.took
		r.progressf("   triggers %d: %d writers for %s, triggers on, gate shut as while draining", i+1, writers, dur)
		w, err = write(ctx, shut.pool, writers, 0, dur, plainInsert, false)
		if err != nil {
			return nil, err
		}
		trig.rows, trig.took = trig.rows+w.rows, trig.took+w.took
	}
	plain.drop(ctx)
	shut.drop(ctx)

	st, err := r.startStack(ctx, "overhead")
	if err != nil {
		return nil, err
	}
	defer st.close(ctx)
	s, f, d := st.s, st.f, st.d
	r.progressf("   syncer: %d writers for %s, triggers on, daemon running", writers, dur)
	got, err := write(ctx, s.pool, writers, 0, dur, plainInsert, false)
	if err != nil {
		return nil, err
	}
	if _, err := s.waitDrained(ctx, f.Server, got.rows, drainLimit(int(got.rows))); err != nil {
		return nil, err
	}
	if err := d.stop(); err != nil {
		return nil, err
	}
	ratio := trig.rate() / base.rate()
	all := got.rate() / base.rate()
	return []Row{{
		Scenario: "writer overhead",
		Measured: fmt.Sprintf("%s inserts/s (%d writers, syncer's triggers)", count(trig.rate()), writers),
		Baseline: fmt.Sprintf("plain %s inserts/s", count(base.rate())),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.85x",
		Pass:     ratio >= 0.85,
		Values:   map[string]float64{"inserts_per_s": trig.rate(), "plain_inserts_per_s": base.rate(), "ratio": ratio},
	}, {
		Scenario: "writers, daemon running",
		Measured: fmt.Sprintf("%s inserts/s (%d writers, daemon exporting them)", count(got.rate()), writers),
		Baseline: fmt.Sprintf("plain %s inserts/s", count(base.rate())),
		Figure:   fmt.Sprintf("%.2fx", all),
		Target:   ">= 0.75x",
		Pass:     all >= 0.75,
		Values:   map[string]float64{"inserts_per_s": got.rate(), "plain_inserts_per_s": base.rate(), "ratio": all},
	}}, nil
}

func (r *runner) memory(ctx context.Context) ([]Row, error) {
	const limit = 32 << 20
	small, large := r.sizes.MemorySmallRows, r.sizes.MemoryLargeRows
	rs, err := r.syncerDrain(ctx, "memory-small", small, "")
	if err != nil {
		return nil, err
	}
	rows := []Row{{
		Scenario: "memory (small)",
		Measured: fmt.Sprintf("peak RSS %s draining %s rows", mib(rs.peakRSS), count(float64(small))),
		Baseline: "-",
		Figure:   mib(rs.peakRSS),
		Target:   "<= 32 MiB",
		Pass:     rs.peakRSS <= limit,
		Values:   map[string]float64{"rows": float64(small), "peak_rss_bytes": float64(rs.peakRSS), "rows_per_s": rs.rate},
	}}
	rl, err := r.syncerDrain(ctx, "memory-large", large, "")
	if err != nil {
		return rows, err
	}
	growth := float64(rl.peakRSS) / float64(rs.peakRSS)
	rows = append(rows, Row{
		Scenario: "memory (large)",
		Measured: fmt.Sprintf("peak RSS %s draining %s rows", mib(rl.peakRSS), count(float64(large))),
		Baseline: fmt.Sprintf("%s at %s rows", mib(rs.peakRSS), count(float64(small))),
		Figure:   fmt.Sprintf("%s, %.2fx of small", mib(rl.peakRSS), growth),
		Target:   "<= 32 MiB, growth <= 1.25x",
		Pass:     rl.peakRSS <= limit && growth <= 1.25,
		Values:   map[string]float64{"rows": float64(large), "peak_rss_bytes": float64(rl.peakRSS), "growth": growth, "rows_per_s": rl.rate},
	})
	return rows, nil
}
