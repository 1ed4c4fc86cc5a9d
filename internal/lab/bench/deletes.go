package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/resources"
)

// The deletes scenario: what tombstones cost writers, and how fast the
// daemon drains them.
//
//   - delete overhead: 8 writers of single-row deletes with syncer's
//     triggers (a tombstone per row, the gate) against the same deletes on
//     the table without triggers. Target as for inserts, >= 0.80x.
//   - writers, no daemon: single-row inserts with the triggers while no
//     daemon is alive (the gate's lease lapsed), against plain inserts.
//     Target >= 0.80x: a dead daemon costs writers what a busy one does.
//   - tombstone drain: the daemon drains half the drain's size of
//     tombstones, against the database's own bound for the same reads and
//     marks. Target as for rows, >= 0.60x.

// tombstoneDrainProcedure is the database's bound for tombstones, as
// dbDrainProcedure is for rows.
const tombstoneDrainProcedure = `CREATE PROCEDURE bench_db_drain_tombstones(batch int) LANGUAGE plpgsql AS $$
DECLARE
    last     bigint := -9223372036854775808;
    ids      bigint[];
    versions bigint[];
BEGIN
    LOOP
        SELECT array_agg(id ORDER BY id), array_agg(version ORDER BY id)
          INTO ids, versions
          FROM (SELECT id, version FROM syncer_tombstones
                 WHERE synced_at IS NULL AND failed_at IS NULL AND id > last
                 ORDER BY id LIMIT batch) b;
        EXIT WHEN ids IS NULL;
        UPDATE syncer_tombstones t SET synced_at = now(), failed_at = NULL, sync_error = NULL
          FROM unnest(ids, versions) AS b(id, version)
         WHERE t.id = b.id AND t.version = b.version;
        last := ids[cardinality(ids)];
        COMMIT;
    END LOOP;
END
$$`

func deleteByID(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error) {
	_, err := conn.Exec(ctx, `DELETE FROM resources WHERE id = $1`, i)
	return i, err
}

// deleteRate runs the writers' single-row deletes for the overhead's
// duration on a fresh table of n rows.
func (r *runner) deleteRate(ctx context.Context, label string, plain bool, n int) (writeResult, error) {
	s, err := r.newScratch(ctx, label, plain)
	if err != nil {
		return writeResult{}, err
	}
	defer s.drop(ctx)
	if err := s.preload(ctx, n); err != nil {
		return writeResult{}, err
	}
	return write(ctx, s.pool, r.sizes.Writers, 0, r.sizes.OverheadFor, deleteByID, false)
}

// preloadTombstones makes n synced rows and deletes them in one statement.
// Both tables are vacuumed, as autovacuum would after such a delete: the
// daemon's reads of pending rows and tombstones walk both pending indexes,
// and the bound reads only the tombstones'.
func (s *scratch) preloadTombstones(ctx context.Context, n int) error {
	if err := s.exec(ctx, "preload tombstones", `INSERT INTO resources (payload) SELECT `+payloadSQL+` FROM generate_series(1, $1) i`, n); err != nil {
		return err
	}
	for _, sql := range []string{`UPDATE resources SET synced_at = now()`, `DELETE FROM resources`} {
		if err := s.exec(ctx, "preload tombstones", sql); err != nil {
			return err
		}
	}
	return s.settle(ctx, "resources", "syncer_tombstones")
}

func (r *runner) dbTombstoneDrainRate(ctx context.Context, n int) (float64, error) {
	s, err := r.newScratch(ctx, "tombstones-db", false)
	if err != nil {
		return 0, err
	}
	defer s.drop(ctx)
	if err := s.preloadTombstones(ctx, n); err != nil {
		return 0, err
	}
	if _, err := s.pool.Exec(ctx, tombstoneDrainProcedure); err != nil {
		return 0, fmt.Errorf("bench: create the tombstone drain procedure: %w", err)
	}
	start := time.Now()
	if _, err := s.pool.Exec(ctx, fmt.Sprintf("CALL bench_db_drain_tombstones(%d)", r.sizes.BatchSize)); err != nil {
		return 0, fmt.Errorf("bench: run the tombstone drain procedure: %w", err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func (r *runner) syncerTombstoneDrainRate(ctx context.Context, n int) (float64, error) {
	s, err := r.newScratch(ctx, "tombstones", false)
	if err != nil {
		return 0, err
	}
	defer s.drop(ctx)
	if err := s.preloadTombstones(ctx, n); err != nil {
		return 0, err
	}
	f, err := startFake(n)
	if err != nil {
		return 0, err
	}
	defer f.close()
	d, err := r.startDaemon(ctx, s, f, false)
	if err != nil {
		return 0, err
	}
	defer d.stop()
	wctx, cancel := context.WithTimeout(ctx, drainLimit(n))
	defer cancel()
	for {
		// The fake's count first: asking the database while the daemon
		// drains would take its time from the drain being measured (a
		// pending check over 100,000 freshly deleted rows costs ~5 ms).
		if f.Stats().ItemsAccepted >= int64(n) {
			pending, err := resources.AnyPending(wctx, s.pool)
			if err != nil {
				return 0, fmt.Errorf("bench: wait for the tombstones (the fake accepted %d of %d): %w", f.Stats().ItemsAccepted, n, err)
			}
			if !pending {
				break
			}
		}
		select {
		case <-wctx.Done():
			return 0, fmt.Errorf("bench: tombstones not drained after %s: the fake accepted %d of %d", drainLimit(n), f.Stats().ItemsAccepted, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	end := time.Now()
	start := d.started
	if first := f.Stats().FirstRequestAt; first.After(start) {
		start = first
	}
	if err := d.stop(); err != nil {
		return 0, err
	}
	return float64(n) / end.Sub(start).Seconds(), nil
}

func (r *runner) deletes(ctx context.Context) ([]Row, error) {
	n := r.sizes.DrainRows
	var rows []Row

	// Plain, triggers, triggers, plain: the machine drifts over a run
	// (autovacuum of the rows the last run deleted, checkpoints), and one
	// of each in a fixed order put the figure anywhere from 0.70x to 0.88x
	// over the same code. Each side sums its two runs.
	var base, trig writeResult
	for i, plain := range []bool{true, false, false, true} {
		label, what := "deletes-triggers", "triggers: %d writers deleting for %s, a tombstone per row (%d/4)"
		if plain {
			label, what = "deletes-plain", "plain: %d writers deleting for %s, no triggers (%d/4)"
		}
		r.progressf("   "+what, r.sizes.Writers, r.sizes.OverheadFor, i+1)
		got, err := r.deleteRate(ctx, label, plain, n)
		if err != nil {
			return rows, err
		}
		sum := &trig
		if plain {
			sum = &base
		}
		sum.rows += got.rows
		sum.took += got.took
	}
	ratio := trig.rate() / base.rate()
	rows = append(rows, Row{
		Scenario: "delete overhead",
		Measured: fmt.Sprintf("%s deletes/s (%d writers, syncer's triggers)", count(trig.rate()), r.sizes.Writers),
		Baseline: fmt.Sprintf("plain %s deletes/s", count(base.rate())),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.80x",
		Pass:     ratio >= 0.8,
		Values:   map[string]float64{"deletes_per_s": trig.rate(), "plain_deletes_per_s": base.rate(), "ratio": ratio},
	})

	// Inserts with no daemon: as migrated, the gate is armed and its lease
	// has never been taken.
	plain, err := r.newScratch(ctx, "nodaemon-plain", true)
	if err != nil {
		return rows, err
	}
	r.progressf("   plain: %d writers inserting for %s", r.sizes.Writers, r.sizes.OverheadFor)
	pbase, err := write(ctx, plain.pool, r.sizes.Writers, 0, r.sizes.OverheadFor, plainInsert, false)
	plain.drop(ctx)
	if err != nil {
		return rows, err
	}
	none, err := r.newScratch(ctx, "nodaemon", false)
	if err != nil {
		return rows, err
	}
	r.progressf("   triggers, no daemon: %d writers inserting for %s", r.sizes.Writers, r.sizes.OverheadFor)
	nd, err := write(ctx, none.pool, r.sizes.Writers, 0, r.sizes.OverheadFor, plainInsert, false)
	var events int64
	if err == nil {
		err = none.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_outbox`).Scan(&events)
	}
	none.drop(ctx)
	if err != nil {
		return rows, err
	}
	nratio := nd.rate() / pbase.rate()
	rows = append(rows, Row{
		Scenario: "writers, no daemon",
		Measured: fmt.Sprintf("%s inserts/s (%d writers, triggers, no daemon; %d outbox events)", count(nd.rate()), r.sizes.Writers, events),
		Baseline: fmt.Sprintf("plain %s inserts/s", count(pbase.rate())),
		Figure:   fmt.Sprintf("%.2fx", nratio),
		Target:   ">= 0.80x, 0 events",
		Pass:     nratio >= 0.8 && events == 0,
		Values:   map[string]float64{"inserts_per_s": nd.rate(), "plain_inserts_per_s": pbase.rate(), "ratio": nratio, "outbox_events": float64(events)},
	})

	tn := max(n/2, 1)
	// As for rows (see alternate): one drain of 100,000 tombstones lasts
	// about a second, and a single one moved by a third from run to run.
	dbRate, rate, err := r.alternate(func(i int) (float64, error) {
		r.progressf("   database bound %d/%d: %s tombstones, plpgsql loop", i+1, r.sizes.DrainRepeats, count(float64(tn)))
		return r.dbTombstoneDrainRate(ctx, tn)
	}, func(i int) (float64, error) {
		r.progressf("   daemon %d/%d: draining %s tombstones", i+1, r.sizes.DrainRepeats, count(float64(tn)))
		return r.syncerTombstoneDrainRate(ctx, tn)
	})
	if err != nil {
		return rows, err
	}
	dratio := rate / dbRate
	rows = append(rows, Row{
		Scenario: "tombstone drain",
		Measured: fmt.Sprintf("%s tombstones/s (%s tombstones, median of %d)", count(rate), count(float64(tn)), r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("database bound %s tombstones/s (median of %d)", count(dbRate), r.sizes.DrainRepeats),
		Figure:   fmt.Sprintf("%.2fx", dratio),
		Target:   ">= 0.60x",
		Pass:     dratio >= 0.6,
		Values:   map[string]float64{"tombstones": float64(tn), "tombstones_per_s": rate, "db_tombstones_per_s": dbRate, "ratio": dratio},
	})
	return rows, nil
}
