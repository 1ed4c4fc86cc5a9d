package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The unexported writers row of the sources scenario (issue 45): writers
// of single-row updates that change only a column the source does not
// export (orders with `columns: [status, total]`, each update setting
// created_at), on a table with the source's triggers, gate shut, against
// the same updates on the same table without triggers, alternating. The
// capture compares each row's exported columns before and after and logs
// nothing, so the writers pay for the comparison and not for a change row.
// Target: at least the source writers' ratio of the same run (the
// inserts'), the "writers must not get slower for it".

// unexportedRows is how many rows the updates spread over: enough that 8
// writers seldom wait on one row's lock.
const unexportedRows = 20_000

// unexportedWriters measures the row; target is the source writers' ratio
// measured just before.
func (r *runner) unexportedWriters(ctx context.Context, target float64) (Row, error) {
	dur, writers := r.sizes.OverheadFor, r.sizes.Writers
	dir, err := os.MkdirTemp("", "syncer-bench-")
	if err != nil {
		return Row{}, err
	}
	defer os.RemoveAll(dir)
	path, err := writeSourceConfig(dir, []benchSource{{table: "orders", destination: "api", url: "http://127.0.0.1:9", columns: "[status, total]"}})
	if err != nil {
		return Row{}, err
	}
	plain, err := r.newScratch(ctx, "unexported-plain", true)
	if err != nil {
		return Row{}, err
	}
	defer plain.drop(ctx)
	if _, err := plain.pool.Exec(ctx, "CREATE TABLE orders "+ordersTable); err != nil {
		return Row{}, fmt.Errorf("bench: create orders: %w", err)
	}
	if err := plain.preloadOrders(ctx, "orders", unexportedRows); err != nil {
		return Row{}, err
	}
	trig, err := r.newScratch(ctx, "unexported", false)
	if err != nil {
		return Row{}, err
	}
	defer trig.drop(ctx)
	if err := trig.installSources(ctx, path, "orders"); err != nil {
		return Row{}, err
	}
	if err := trig.preloadOrders(ctx, "orders", unexportedRows); err != nil {
		return Row{}, err
	}
	if _, err := trig.pool.Exec(ctx, `UPDATE syncer_gate SET armed = false`); err != nil {
		return Row{}, err
	}
	var before int64
	if err := trig.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_changes`).Scan(&before); err != nil {
		return Row{}, err
	}
	var base, got writeResult
	for i := range r.sourceSizes().repeats {
		r.progressf("   plain %d: %d writers updating for %s, orders without triggers", i+1, writers, dur)
		w, err := write(ctx, plain.pool, writers, 0, dur, touchOrder, false)
		if err != nil {
			return Row{}, err
		}
		base.rows, base.took = base.rows+w.rows, base.took+w.took
		r.progressf("   source %d: %d writers updating an unexported column for %s, gate shut", i+1, writers, dur)
		w, err = write(ctx, trig.pool, writers, 0, dur, touchOrder, false)
		if err != nil {
			return Row{}, err
		}
		got.rows, got.took = got.rows+w.rows, got.took+w.took
	}
	var after int64
	if err := trig.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_changes`).Scan(&after); err != nil {
		return Row{}, err
	}
	if after != before {
		return Row{}, fmt.Errorf("bench: unexported writers: %d updates of an unexported column logged %d changes", got.rows, after-before)
	}
	ratio := got.rate() / base.rate()
	return Row{
		Scenario: "unexported writers",
		Measured: fmt.Sprintf("%s updates/s (%d writers, columns: [status, total], updating created_at, gate shut; 0 changes logged)", count(got.rate()), writers),
		Baseline: fmt.Sprintf("plain %s updates/s", count(base.rate())),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   fmt.Sprintf(">= %.2fx (source writers)", target),
		Pass:     ratio >= target,
		Values:   map[string]float64{"updates_per_s": got.rate(), "plain_updates_per_s": base.rate(), "ratio": ratio, "target": target},
	}, nil
}

// touchOrder updates one row's unexported column, spreading the writers
// over unexportedRows rows.
func touchOrder(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error) {
	id := (i*7919)%unexportedRows + 1
	_, err := conn.Exec(ctx, `UPDATE orders SET created_at = now() WHERE id = $1`, id)
	return id, err
}
