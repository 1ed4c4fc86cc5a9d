package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// The drain rows of a source (source drain, composite drain): the daemon
// draining a source's pending changes against the database's bound for
// the same reads and marks, alternating.

// sourceDrainProcedure is the database's bound for a source: the same
// reads as sources.Pending (the next keys by keyset on the change log's
// index, each key's row by its primary key, whole) and the same marks as
// sources.MarkSynced (the keys' changes up to their version deleted), with
// a COMMIT per batch.
const sourceDrainProcedure = `CREATE PROCEDURE bench_db_drain_source(src text, batch int) LANGUAGE plpgsql AS $$
DECLARE
    last_num bigint := -9223372036854775808;
    last_key text := '';
    nums     bigint[];
    keys     text[];
    versions bigint[];
    payloads jsonb[];
BEGIN
    LOOP
        SELECT array_agg(k.num ORDER BY k.num, k.key), array_agg(k.key ORDER BY k.num, k.key),
               array_agg(k.version ORDER BY k.num, k.key), array_agg(r.payload ORDER BY k.num, k.key)
          INTO nums, keys, versions, payloads
          FROM (SELECT c.num, c.key, max(c.seq) AS version FROM syncer_changes c
                 WHERE c.source = src AND (c.num, c.key) > (last_num, last_key COLLATE "C")
                 GROUP BY c.num, c.key ORDER BY c.num, c.key LIMIT batch) k
          LEFT JOIN LATERAL (SELECT to_jsonb(t) AS payload FROM %s t WHERE %s LIMIT 1) r ON true;
        EXIT WHEN nums IS NULL;
        WITH b AS (SELECT * FROM unnest(nums, keys, versions) AS b(num, key, version)),
        done AS (DELETE FROM syncer_changes c USING b
                  WHERE c.source = src AND c.num = b.num AND c.key = b.key COLLATE "C" AND c.seq <= b.version)
        DELETE FROM syncer_source_failures f USING b
         WHERE f.source = src AND f.key = b.key COLLATE "C" AND f.version <= b.version;
        last_num := nums[cardinality(nums)];
        last_key := keys[cardinality(keys)];
        COMMIT;
    END LOOP;
END
$$`

// dbSourceDrainRateOf measures the database bound for a source named
// orders of shape.
func (r *runner) dbSourceDrainRateOf(ctx context.Context, path string, n int, shape tableShape) (float64, error) {
	s, err := r.newScratch(ctx, "src-drain-db", false)
	if err != nil {
		return 0, err
	}
	defer s.drop(ctx)
	if err := s.installShaped(ctx, path, shape, "orders"); err != nil {
		return 0, err
	}
	if err := s.preloadShaped(ctx, shape, "orders", n); err != nil {
		return 0, err
	}
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(sourceDrainProcedure, "orders", shape.lookup)); err != nil {
		return 0, fmt.Errorf("bench: create the source drain procedure: %w", err)
	}
	start := time.Now()
	if _, err := s.pool.Exec(ctx, fmt.Sprintf("CALL bench_db_drain_source('orders', %d)", r.sizes.BatchSize)); err != nil {
		return 0, fmt.Errorf("bench: run the source drain procedure: %w", err)
	}
	took := time.Since(start)
	if left, err := s.sourcePending(ctx, "orders"); err != nil || left != 0 {
		return 0, fmt.Errorf("bench: the source drain procedure left %d changes (%v)", left, err)
	}
	return float64(n) / took.Seconds(), nil
}

// sourceDrain is the source drain row: a source of ordersShape.
func (r *runner) sourceDrain(ctx context.Context) (Row, error) {
	n := r.sourceSizes().drainRows
	rate, dbRate, err := r.drainShaped(ctx, "source drain", ordersShape)
	if err != nil {
		return Row{}, err
	}
	ratio := rate / dbRate
	return Row{
		Scenario: "source drain",
		Measured: fmt.Sprintf("%s rows/s (%s rows, whole row, --config alone, median of %d)", count(rate), count(float64(n)), r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("database bound %s rows/s (median of %d)", count(dbRate), r.sizes.DrainRepeats),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.50x",
		Pass:     ratio >= 0.5,
		Values:   map[string]float64{"rows": float64(n), "rows_per_s": rate, "db_rows_per_s": dbRate, "ratio": ratio},
	}, nil
}

// drainShaped measures the row named scenario: the daemon draining a
// source of shape (--config alone, whole row) and the database bound for
// the same table, alternating; it returns their rates.
func (r *runner) drainShaped(ctx context.Context, scenario string, shape tableShape) (rate, dbRate float64, err error) {
	n := r.sourceSizes().drainRows
	path, cleanup, err := ordersConfigShaped("", shape)
	if err != nil {
		return 0, 0, err
	}
	defer cleanup()
	var dups int64
	var profile string
	if r.cfg.ProfileDir != "" {
		profile = filepath.Join(r.cfg.ProfileDir, strings.ReplaceAll(scenario, " ", "-")+".cpu.pprof")
	}
	dbRate, rate, err = r.alternate(func(i int) (float64, error) {
		r.progressf("   database bound %d/%d: %s pending rows of a source keyed %s, plpgsql loop", i+1, r.sizes.DrainRepeats, count(float64(n)), shape.key)
		return r.dbSourceDrainRateOf(ctx, path, n, shape)
	}, func(int) (float64, error) {
		run, err := r.runSourcesWith(ctx, "src-drain", []string{"orders"}, n, 0, 0, benchFormat{}, sourceRunExtra{shape: shape, profile: profile})
		profile = "" // the first run's
		dups += run.dups
		return float64(n) / run.took.Seconds(), err
	})
	if dups > 0 {
		r.note("%s: the fake saw %d duplicate deliveries", scenario, dups)
	}
	return rate, dbRate, err
}
