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

// unexportedWriters prepares the row. Its target is the source writers'
// ratio of the same rounds (writersRows), read when the row is made.
func (r *runner) unexportedWriters(ctx context.Context) (*writersPair, error) {
	w := &writersPair{r: r, label: "unexported writers", fn: touchOrder, plainWhat: "updates of orders without triggers",
		sourceWhat: "updates of an unexported column, source's triggers, gate shut"}
	ready := false
	defer func() {
		if !ready {
			w.cleanup(ctx)
		}
	}()
	dir, err := os.MkdirTemp("", "syncer-bench-")
	if err != nil {
		return nil, err
	}
	w.cleanupRemoved = func() { os.RemoveAll(dir) }
	path, err := writeSourceConfig(dir, []benchSource{{table: "orders", destination: "api", url: "http://127.0.0.1:9", columns: "[status, total]"}})
	if err != nil {
		return nil, err
	}
	if w.plain, err = r.newScratch(ctx, "unexported-plain", true); err != nil {
		return nil, err
	}
	if _, err := w.plain.pool.Exec(ctx, "CREATE TABLE orders "+ordersTable); err != nil {
		return nil, fmt.Errorf("bench: create orders: %w", err)
	}
	if err := w.plain.preloadOrders(ctx, "orders", unexportedRows); err != nil {
		return nil, err
	}
	if w.trig, err = r.newScratch(ctx, "unexported", false); err != nil {
		return nil, err
	}
	if err := w.trig.installSources(ctx, path, "orders"); err != nil {
		return nil, err
	}
	if err := w.trig.preloadOrders(ctx, "orders", unexportedRows); err != nil {
		return nil, err
	}
	if _, err := w.trig.pool.Exec(ctx, `UPDATE syncer_gate SET armed = false`); err != nil {
		return nil, err
	}
	var before int64
	if err := w.trig.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_changes`).Scan(&before); err != nil {
		return nil, err
	}
	w.row = func(ctx context.Context) (Row, error) {
		var after int64
		if err := w.trig.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_changes`).Scan(&after); err != nil {
			return Row{}, err
		}
		if after != before {
			return Row{}, fmt.Errorf("bench: unexported writers: %d updates of an unexported column logged %d changes", w.got.rows, after-before)
		}
		target := w.target()
		ratio := w.got.rate() / w.base.rate()
		return Row{
			Scenario: "unexported writers",
			Measured: fmt.Sprintf("%s updates/s (%d writers, columns: [status, total], updating created_at, gate shut; 0 changes logged)", count(w.got.rate()), r.sizes.Writers),
			Baseline: fmt.Sprintf("plain %s updates/s", count(w.base.rate())),
			Figure:   fmt.Sprintf("%.2fx", ratio),
			Target:   fmt.Sprintf(">= %.2fx (source writers, same rounds)", target),
			Pass:     ratio >= target,
			Values:   map[string]float64{"updates_per_s": w.got.rate(), "plain_updates_per_s": w.base.rate(), "ratio": ratio, "target": target},
		}, nil
	}
	ready = true
	return w, nil
}

// touchOrder updates one row's unexported column, spreading the writers
// over unexportedRows rows.
func touchOrder(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error) {
	id := (i*7919)%unexportedRows + 1
	_, err := conn.Exec(ctx, `UPDATE orders SET created_at = now() WHERE id = $1`, id)
	return id, err
}
