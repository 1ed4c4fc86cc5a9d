package bench

import (
	"cmp"
	"context"
	"fmt"
)

// The writers rows of the sources and shapes scenarios: writers on a
// source's table, gate shut, against the same writers without triggers,
// alternating (writersPair). The sources scenario runs source writers'
// and unexported writers' rounds in turn (writersRows).

// writersOf measures the row named scenario: writers on orders with a
// source's triggers (its row filter where, if any), gate shut, against
// the same inserts without triggers, alternating; target is the least
// ratio that passes.
func (r *runner) writersOf(ctx context.Context, scenario, where string, target float64) (Row, error) {
	w, err := r.insertWriters(ctx, scenario, where, target)
	if err != nil {
		return Row{}, err
	}
	defer w.cleanup(ctx)
	for i := range r.sourceSizes().repeats {
		if err := w.round(ctx, i); err != nil {
			return Row{}, err
		}
	}
	return w.row(ctx)
}

// writersPair is a writers row ready to measure: each round runs the
// plain writers, then the same writers on the source's table, and row
// turns the rounds into the row. The sources scenario runs the rounds of
// two rows in turn, so the two ratios see the same moments of a shared
// machine (unexported writers' target is source writers' ratio).
type writersPair struct {
	r              *runner
	label          string // the progress lines'
	plainWhat      string
	sourceWhat     string
	plain, trig    *scratch
	fn             insertFunc
	base, got      writeResult
	row            func(ctx context.Context) (Row, error)
	cleanupRemoved func()
	// against is the row whose ratio is this row's target (unexported
	// writers': source writers').
	against *writersPair
}

// target is the ratio of the row measured against, 0.80 (source
// writers' own target) without one.
func (w *writersPair) target() float64 {
	if w.against == nil || w.against.base.rate() == 0 {
		return 0.80
	}
	return w.against.got.rate() / w.against.base.rate()
}

func (w *writersPair) round(ctx context.Context, i int) error {
	dur, writers := w.r.sizes.OverheadFor, w.r.sizes.Writers
	w.r.progressf("   %s: plain %d: %d writers for %s, %s", w.label, i+1, writers, dur, w.plainWhat)
	res, err := write(ctx, w.plain.pool, writers, 0, dur, w.fn, false)
	if err != nil {
		return err
	}
	w.base.rows, w.base.took = w.base.rows+res.rows, w.base.took+res.took
	w.r.progressf("   %s: source %d: %d writers for %s, %s", w.label, i+1, writers, dur, w.sourceWhat)
	res, err = write(ctx, w.trig.pool, writers, 0, dur, w.fn, false)
	if err != nil {
		return err
	}
	w.got.rows, w.got.took = w.got.rows+res.rows, w.got.took+res.took
	return nil
}

func (w *writersPair) cleanup(ctx context.Context) {
	if w.plain != nil {
		w.plain.drop(ctx)
	}
	if w.trig != nil {
		w.trig.drop(ctx)
	}
	if w.cleanupRemoved != nil {
		w.cleanupRemoved()
	}
}

// insertWriters prepares writersOf's row.
func (r *runner) insertWriters(ctx context.Context, scenario, where string, target float64) (*writersPair, error) {
	w := &writersPair{r: r, label: scenario, fn: insertOrder, plainWhat: "orders without triggers",
		sourceWhat: "orders with a source's triggers, gate shut"}
	ready := false
	defer func() {
		if !ready {
			w.cleanup(ctx)
		}
	}()
	path, cleanup, err := ordersConfigWhere(where)
	if err != nil {
		return nil, err
	}
	w.cleanupRemoved = cleanup
	if w.plain, err = r.newScratch(ctx, "src-writers-plain", true); err != nil {
		return nil, err
	}
	if _, err := w.plain.pool.Exec(ctx, "CREATE TABLE orders "+ordersTable); err != nil {
		return nil, fmt.Errorf("bench: create orders: %w", err)
	}
	if w.trig, err = r.newScratch(ctx, "src-writers", false); err != nil {
		return nil, err
	}
	if err := w.trig.installSources(ctx, path, "orders"); err != nil {
		return nil, err
	}
	if _, err := w.trig.pool.Exec(ctx, `UPDATE syncer_gate SET armed = false`); err != nil {
		return nil, err
	}
	w.row = func(ctx context.Context) (Row, error) {
		var changes int64
		if err := w.trig.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_changes`).Scan(&changes); err != nil {
			return Row{}, err
		}
		if changes != w.got.rows {
			return Row{}, fmt.Errorf("bench: %s: %d inserts logged %d changes", scenario, w.got.rows, changes)
		}
		ratio := w.got.rate() / w.base.rate()
		what := "a source's triggers"
		if where != "" {
			what = "a source's triggers with where: " + where
		}
		return Row{
			Scenario: scenario,
			Measured: fmt.Sprintf("%s inserts/s (%d writers, %s, gate shut)", count(w.got.rate()), r.sizes.Writers, what),
			Baseline: fmt.Sprintf("plain %s inserts/s", count(w.base.rate())),
			Figure:   fmt.Sprintf("%.2fx", ratio),
			Target:   fmt.Sprintf(">= %.2fx", target),
			Pass:     ratio >= target,
			Values:   map[string]float64{"inserts_per_s": w.got.rate(), "plain_inserts_per_s": w.base.rate(), "ratio": ratio},
		}, nil
	}
	ready = true
	return w, nil
}

// writersRows measures source writers and unexported writers, their
// rounds in turn.
func (r *runner) writersRows(ctx context.Context) ([]Row, error) {
	src, err := r.insertWriters(ctx, "source writers", "", 0.80)
	if err != nil {
		r.progressf("   %v", err)
		return nil, err
	}
	defer src.cleanup(ctx)
	unexp, err := r.unexportedWriters(ctx)
	if err != nil {
		r.progressf("   %v", err)
		return nil, err
	}
	defer unexp.cleanup(ctx)
	unexp.against = src
	for i := range r.sourceSizes().repeats {
		for _, w := range []*writersPair{src, unexp} {
			if err := w.round(ctx, i); err != nil {
				r.progressf("   %v", err)
				return nil, err
			}
		}
	}
	var rows []Row
	var first error
	for _, w := range []*writersPair{src, unexp} {
		row, err := w.row(ctx)
		if err != nil {
			r.progressf("   %v", err)
			first = cmp.Or(first, err)
			continue
		}
		rows = append(rows, row)
	}
	return rows, first
}
