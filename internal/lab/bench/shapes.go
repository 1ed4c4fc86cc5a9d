package bench

import (
	"context"
	"fmt"
)

// The shapes scenario (issue 29): the tables real applications have.
//
//   - source writers, filtered writers: the writers on a table whose
//     source has a row filter, against the same table without triggers,
//     beside the single-key source writers (within 10%).
//   - source drain, composite drain: the daemon draining a source keyed by
//     (tenant_id text, id bigint), against the database's bound for the
//     same reads (each row looked up by the key's two columns) and marks,
//     beside the single-key source drain: its ratio within 10% of that
//     row's.

// tableShape is an application table of the sources scenarios: its
// columns, its key as the file says it, how n rows are preloaded (a format
// of the quoted table, taking n as $1), and how the database bound looks a
// change's row up (k.num, k.key of the change log; t the table).
type tableShape struct {
	ddl, key, preload, lookup string
}

// ordersShape is the table of the sources scenarios: one bigint key.
var ordersShape = tableShape{
	ddl:     ordersTable,
	key:     "id",
	preload: `INSERT INTO %s (status, total) SELECT 'new', (i %% 1000) + 0.5 FROM generate_series(1, $1) i`,
	lookup:  "t.id = k.num",
}

// compositeShape is a multi-tenant table: its key is (tenant_id, id),
// logged as the compact JSON array of the two and read back column by
// column.
var compositeShape = tableShape{
	ddl:     `(tenant_id text, id bigint, status text, total numeric, created_at timestamptz DEFAULT now(), PRIMARY KEY (tenant_id, id))`,
	key:     "[tenant_id, id]",
	preload: `INSERT INTO %s (tenant_id, id, status, total) SELECT 'tenant-' || (i %% 64), i, 'new', (i %% 1000) + 0.5 FROM generate_series(1, $1) i`,
	lookup:  "t.tenant_id = (k.key::jsonb ->> 0) AND t.id = (k.key::jsonb ->> 1)::bigint",
}

// shapesScenario runs the rows of issue 29 in one run: source writers (the
// single-key baseline) and filtered writers, then the single-key source
// drain and the composite drain, so their ratios compare.
func (r *runner) shapesScenario(ctx context.Context) ([]Row, error) {
	var rows []Row
	for _, fn := range []func(context.Context) (Row, error){r.sourceWriters, r.filteredWriters, r.sourceDrain} {
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		row, err := fn(ctx)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
	row, err := r.compositeDrain(ctx, rows[len(rows)-1].Values["ratio"])
	if err != nil {
		return rows, err
	}
	return append(rows, row), nil
}

// compositeDrain: the daemon draining a source of compositeShape against
// the database bound for it, alternating; single is the single-key source
// drain's ratio in the same run.
func (r *runner) compositeDrain(ctx context.Context, single float64) (Row, error) {
	n := r.sourceSizes().drainRows
	rate, dbRate, err := r.drainShaped(ctx, "composite drain", compositeShape)
	if err != nil {
		return Row{}, err
	}
	ratio := rate / dbRate
	return Row{
		Scenario: "composite drain",
		Measured: fmt.Sprintf("%s rows/s (%s rows keyed (tenant_id text, id bigint), median of %d)", count(rate), count(float64(n)), r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("database bound %s rows/s; the single-key drain's ratio %.2fx", count(dbRate), single),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.9 of the single-key ratio",
		Pass:     ratio >= 0.9*single,
		Values:   map[string]float64{"rows": float64(n), "rows_per_s": rate, "db_rows_per_s": dbRate, "ratio": ratio, "single_ratio": single},
	}, nil
}
