package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// The receipt scenario (issue 32): commit to receipt while writers insert
// at a steady rate, single-row transactions, each row timed from its
// writer's commit to its first acceptance at the fake on loopback. One row
// per case: a configured source (orders, whole row) at 500 and 2,000
// inserts a second, resources at 2,000 and at 4,000 (a connection per
// writer, 32 of them), after a first row's receipt, from writers already
// connected. The baseline, measured in the same run, is what was
// offered: the rate the writers were paced at, and their own insert round
// trip. Targets are the issue's: p50 <= 5 ms, p99 <= 20 ms and writers >=
// 0.95 of the offered rate; at 4,000 resources' p50 <= 10 ms, p99 <= 50 ms.
// A last row sets the daemon's CPU per row at 500 a second against a plain
// polling exporter's on the same writes (receipt_poller.go).

// receiptCase is one row of the scenario.
type receiptCase struct {
	row     string
	source  bool // orders as a configured source; else resources
	rate    int  // inserts offered a second
	writers int  // connections, one writer each
	p50     time.Duration
	p99     time.Duration
}

// receiptCases are the scenario's rows, in order.
var receiptCases = []receiptCase{
	{row: "receipt: resources 500/s", rate: 500, writers: 8, p50: 5 * time.Millisecond, p99: 20 * time.Millisecond},
	{row: "receipt: source 500/s", source: true, rate: 500, writers: 8, p50: 5 * time.Millisecond, p99: 20 * time.Millisecond},
	{row: "receipt: source 2,000/s", source: true, rate: 2000, writers: 8, p50: 5 * time.Millisecond, p99: 20 * time.Millisecond},
	{row: "receipt: resources 2,000/s", rate: 2000, writers: 8, p50: 5 * time.Millisecond, p99: 20 * time.Millisecond},
	{row: "receipt: resources 4,000/s", rate: 4000, writers: 32, p50: 10 * time.Millisecond, p99: 50 * time.Millisecond},
}

// receiptSameRow compares a source with resources at 500 inserts a
// second, the two rows of one run (issue 34: one path for both, so within
// 2x of each other).
const receiptSameRow = "receipt: source / resources at 500/s"

// receiptRows names the rows, for rowNames.
func receiptRows() []string {
	out := make([]string, 0, len(receiptCases)+1)
	for _, c := range receiptCases {
		out = append(out, c.row)
	}
	return append(out, receiptSameRow, receiptCPURow)
}

// receiptSame is receiptSameRow, from the rows of resources and of a
// source at 500 inserts a second measured in the same run.
func receiptSame(rows []Row) (Row, bool) {
	var res, src *Row
	for i := range rows {
		switch rows[i].Scenario {
		case receiptCases[0].row:
			res = &rows[i]
		case receiptCases[1].row:
			src = &rows[i]
		}
	}
	if res == nil || src == nil || res.Values["p50_ms"] <= 0 || res.Values["p99_ms"] <= 0 {
		return Row{}, false
	}
	p50 := src.Values["p50_ms"] / res.Values["p50_ms"]
	p99 := src.Values["p99_ms"] / res.Values["p99_ms"]
	return Row{
		Scenario: receiptSameRow,
		Measured: fmt.Sprintf("source p50 %.1f ms, p99 %.1f ms", src.Values["p50_ms"], src.Values["p99_ms"]),
		Baseline: fmt.Sprintf("resources p50 %.1f ms, p99 %.1f ms, same run", res.Values["p50_ms"], res.Values["p99_ms"]),
		Figure:   fmt.Sprintf("p50 %.2fx, p99 %.2fx", p50, p99),
		Target:   "<= 2.00x each",
		Pass:     p50 <= 2 && p99 <= 2,
		Values:   map[string]float64{"p50_ratio": p50, "p99_ratio": p99},
	}, true
}

// receiptFor is how long each case writes.
func (r *runner) receiptFor() time.Duration {
	if r.cfg.Size == SizeTiny {
		return time.Second
	}
	return 10 * time.Second
}

func (r *runner) receipt(ctx context.Context) ([]Row, error) {
	var rows []Row
	for _, c := range receiptCases {
		row, err := r.receiptCase(ctx, c)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", c.row, err)
		}
		rows = append(rows, row)
	}
	if same, ok := receiptSame(rows); ok {
		rows = append(rows, same)
	}
	// The plain poller at the first case's rate, for the daemon's CPU.
	p, err := r.receiptPoller(ctx, receiptCases[0], pollerEvery)
	if err != nil {
		return rows, fmt.Errorf("%s: %w", receiptCPURow, err)
	}
	cpu, ok := receiptCPU(rows, p)
	if ok {
		rows = append(rows, cpu)
	}
	// And at the daemon's own cadence: what a look every HotPoll costs any
	// exporter, beside what syncer's costs (docs/benchmarks.md, "The plain
	// poller at syncer's cadence").
	every := daemonHotPoll()
	atCadence, err := r.receiptPoller(ctx, receiptCases[0], every)
	if err != nil {
		return rows, fmt.Errorf("%s: every %s: %w", receiptCPURow, every, err)
	}
	if ok && atCadence.cpuUS > 0 {
		res, src := cpu.Values["resources_cpu_us_per_row"], cpu.Values["source_cpu_us_per_row"]
		r.note("receipt: the plain poller every %s (the daemon's cadence): %.0f µs a row, p50 %s, p99 %s, %.1fx its CPU a row every %s; "+
			"the daemon's %.2fx (resources) and %.2fx (a source) of it", every, atCadence.cpuUS, ms(atCadence.p50), ms(atCadence.p99),
			atCadence.cpuUS/p.cpuUS, pollerEvery, res/atCadence.cpuUS, src/atCadence.cpuUS)
	}
	return rows, nil
}

// daemonHotPoll is the interval of the daemon's looks while writes flow:
// SYNCER_HOT_POLL when the environment the daemon inherits sets it, else
// the default.
func daemonHotPoll() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SYNCER_HOT_POLL")); err == nil && d > 0 {
		return d
	}
	return exporter.HotPollDefault
}

// receiptBed is what a run of a receipt case writes into, whoever exports
// it: the fake that takes its rows, a scratch schema, and the writers'
// pool.
type receiptBed struct {
	total int // rows the case writes
	f     *fake
	s     *scratch
	pool  *pgxpool.Pool
}

func (r *runner) newReceiptBed(ctx context.Context, c receiptCase) (_ *receiptBed, err error) {
	b := &receiptBed{total: int(float64(c.rate) * r.receiptFor().Seconds())}
	defer func() {
		if err != nil {
			b.close(ctx)
		}
	}()
	if b.f, err = startFake(b.total); err != nil {
		return nil, err
	}
	if b.s, err = r.newScratch(ctx, "receipt", false); err != nil {
		return nil, err
	}
	if b.pool, err = r.pool(ctx, b.s.name, int32(c.writers+2)); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *receiptBed) close(ctx context.Context) {
	if b.pool != nil {
		b.pool.Close()
	}
	if b.s != nil {
		b.s.drop(ctx)
	}
	if b.f != nil {
		b.f.close()
	}
}

func (r *runner) receiptCase(ctx context.Context, c receiptCase) (Row, error) {
	b, err := r.newReceiptBed(ctx, c)
	if err != nil {
		return Row{}, err
	}
	defer b.close(ctx)
	total, f, s, pool := b.total, b.f, b.s, b.pool
	insert, settings := plainInsert, []string(nil)
	if c.source {
		dir, err := os.MkdirTemp("", "syncer-bench-")
		if err != nil {
			return Row{}, err
		}
		defer os.RemoveAll(dir)
		path, err := writeSourceConfig(dir, []benchSource{{table: "orders", destination: "api", url: f.url}})
		if err != nil {
			return Row{}, err
		}
		if err := s.installSources(ctx, path, "orders"); err != nil {
			return Row{}, err
		}
		insert = insertOrder
		// The configuration alone: resources not exported.
		settings = []string{"--config", path, "--thirdparty-url="}
	}
	profile := r.cfg.ProfileDir != ""
	d, err := r.startDaemon(ctx, s, f, profile, settings...)
	if err != nil {
		return Row{}, err
	}
	defer d.stop()

	// The rows measure latency at a rate: the daemon's start (its pool's
	// connections and statements, River's first fetch, its job's first
	// look) is over before the writes begin, as it is for a daemon that
	// has run for a while. A first row waits for it, the same row for
	// every case.
	if err := warmUp(ctx, pool, f, insert, int64(total)+1); err != nil {
		return Row{}, fmt.Errorf("%w: %s", err, d.stderr.String())
	}
	r.progressf("   %s: %d inserts/s for %s from %d connections", c.row, c.rate, r.receiptFor(), c.writers)
	// With ProfileDir, a CPU profile of the daemon over the writes, one
	// file a row ("receipt-source-500.cpu.pprof").
	profiled := make(chan error, 1)
	if profile {
		name := strings.NewReplacer("receipt: ", "receipt-", " ", "-", "/s", "", ",", "").Replace(c.row)
		go func() {
			profiled <- d.profile(ctx, int(r.receiptFor().Seconds()), filepath.Join(r.cfg.ProfileDir, name+".cpu.pprof"))
		}()
	} else {
		profiled <- nil
	}
	cpu0, _ := d.cpuSeconds()
	db0 := postgresCPUSeconds()
	w, err := paced(ctx, pool, c.writers, total, time.Second/time.Duration(c.rate), insert)
	if err != nil {
		return Row{}, err
	}
	if err := <-profiled; err != nil {
		return Row{}, err
	}
	if err := waitReceived(ctx, f.Server, w.ids, drainLimit(total)); err != nil {
		return Row{}, fmt.Errorf("%w: %s", err, d.stderr.String())
	}
	cpu1, _ := d.cpuSeconds()
	db1 := postgresCPUSeconds()
	if err := d.stop(); err != nil {
		return Row{}, err
	}
	lat := receiptLatencies(f, w)
	sortDurations(w.rtt)
	p50, p99, pmax := percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	reached := w.rate() / float64(c.rate)
	n := float64(len(lat))
	daemonUS, dbUS := (cpu1-cpu0)/n*1e6, (db1-db0)/n*1e6
	reqs := f.Stats().Requests
	r.note("%s: the daemon used %.0f µs of CPU and PostgreSQL %.0f µs per row exported (writers' inserts included in the latter), in %d requests (%.1f rows each)",
		c.row, daemonUS, dbUS, reqs, n/float64(max(reqs, 1)))
	return Row{
		Scenario: c.row,
		Measured: fmt.Sprintf("p50 %s, p99 %s, max %s; writers %s/s", ms(p50), ms(p99), ms(pmax), count(w.rate())),
		Baseline: fmt.Sprintf("offered %s/s, %d connections; insert p50 %s", count(float64(c.rate)), c.writers, ms(percentile(w.rtt, 0.5))),
		Figure:   fmt.Sprintf("p50 %s, p99 %s, %.2fx", ms(p50), ms(p99), reached),
		Target:   fmt.Sprintf("p50 <= %s, p99 <= %s, >= 0.95x", ms(c.p50), ms(c.p99)),
		Pass:     p50 <= c.p50 && p99 <= c.p99 && reached >= 0.95,
		Values: map[string]float64{
			"rows": n, "offered_per_s": float64(c.rate), "inserts_per_s": w.rate(), "reached": reached,
			"p50_ms": msf(p50), "p99_ms": msf(p99), "max_ms": msf(pmax),
			"insert_p50_ms": msf(percentile(w.rtt, 0.5)), "insert_p99_ms": msf(percentile(w.rtt, 0.99)),
			"daemon_cpu_us_per_row": daemonUS, "db_cpu_us_per_row": dbUS,
		},
	}, nil
}

// receiptLatencies is each row's time from its writer's commit to its
// first acceptance at the fake, sorted.
func receiptLatencies(f *fake, w writeResult) []time.Duration {
	received := map[int64]time.Time{}
	for _, dl := range f.Deliveries() {
		if _, ok := received[dl.ID]; !ok {
			received[dl.ID] = dl.At
		}
	}
	lat := make([]time.Duration, 0, len(w.ids))
	for i, id := range w.ids {
		// The exporter can see a commit before the writer's call returns.
		lat = append(lat, max(received[id].Sub(w.commits[i]), 0))
	}
	sortDurations(lat)
	return lat
}

// warmUp writes one row with insert and waits until the fake has it.
func warmUp(ctx context.Context, pool *pgxpool.Pool, f *fake, insert insertFunc, i int64) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	id, err := insert(ctx, conn, i)
	conn.Release()
	if err != nil {
		return fmt.Errorf("bench: warm-up row: %w", err)
	}
	return waitReceived(ctx, f.Server, []int64{id}, 30*time.Second)
}

// waitReceived waits until the fake accepted every one of ids.
func waitReceived(ctx context.Context, fake *fakethirdparty.Server, ids []int64, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	want := slices.Clone(ids)
	slices.Sort(want)
	for {
		got := map[int64]bool{}
		if fake.Stats().DistinctPairs >= int64(len(want)) {
			for _, dl := range fake.Deliveries() {
				got[dl.ID] = true
			}
			missing := slices.IndexFunc(want, func(id int64) bool { return !got[id] })
			if missing < 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: not received after %s: the fake has %d of %d rows", limit, fake.Stats().DistinctPairs, len(want))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
