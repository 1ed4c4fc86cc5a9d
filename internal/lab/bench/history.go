package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/history"
)

// The history scenario (issue 45): what the rows' story costs.
//
//   - "history drain": the drain with the story written (the default)
//     against the same drain with --no-history, alternating, each the
//     median of its five runs (three read 0.93x to 0.97x of the same
//     binary, the ratio moving more than the story costs). Target: at
//     least 0.95x.
//   - "history lookup": a key's story read by history.Lookup (what
//     `syncer history` and the console run) among ten million entries
//     seeded in SQL with generate_series (requests of 500 keys, ten
//     versions of a million keys), the index tidied and the table
//     analyzed as the Pruner and autovacuum would; then again with as
//     many keys not indexed yet as the Pruner lets wait. Target: p99
//     at most 50 ms in both.

// historySizes are the scenario's amounts.
type historySizes struct {
	drainRows, repeats int
	entries, keys      int
	lookups            int
	pending            int // requests of 500 keys not indexed yet
}

func (r *runner) historySizes() historySizes {
	if r.cfg.Size == SizeTiny {
		return historySizes{drainRows: 3_000, repeats: 1, entries: 100_000, keys: 10_000, lookups: 50, pending: 20}
	}
	return historySizes{drainRows: 100_000, repeats: 5, entries: 10_000_000, keys: 1_000_000, lookups: 500,
		pending: history.TidyRequestsDefault}
}

func (r *runner) historyScenario(ctx context.Context) ([]Row, error) {
	drain, err := r.historyDrain(ctx)
	if err != nil {
		return nil, err
	}
	lookup, err := r.historyLookup(ctx)
	if err != nil {
		return []Row{drain}, err
	}
	return []Row{drain, lookup}, nil
}

func (r *runner) historyDrain(ctx context.Context) (Row, error) {
	sz := r.historySizes()
	var off, on []float64
	for i := range sz.repeats {
		r.progressf("   drain without history %d/%d", i+1, sz.repeats)
		res, err := r.syncerDrainIn(ctx, "history-off", sz.drainRows, "", "", func(*fake) []string { return []string{"--no-history"} })
		if err != nil {
			return Row{}, err
		}
		off = append(off, res.rate)
		r.progressf("   drain with history %d/%d", i+1, sz.repeats)
		if res, err = r.syncerDrain(ctx, "history-on", sz.drainRows, ""); err != nil {
			return Row{}, err
		}
		on = append(on, res.rate)
	}
	onRate, offRate := median(on), median(off)
	ratio := onRate / offRate
	return Row{
		Scenario: "history drain",
		Measured: fmt.Sprintf("%s rows/s with history (%s rows, median of %d)", count(onRate), count(float64(sz.drainRows)), sz.repeats),
		Baseline: fmt.Sprintf("%s rows/s with --no-history (median of %d)", count(offRate), sz.repeats),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.95x",
		Pass:     ratio >= 0.95,
		Values:   map[string]float64{"rows": float64(sz.drainRows), "rows_per_s": onRate, "no_history_rows_per_s": offRate, "ratio": ratio},
	}, nil
}

// seedHistorySQL writes $1 entries over $2 keys, as drains would:
// requests of 500 keys each, all accepted (the common batch, one row of
// syncer_history_requests each), a drain of every key after another, each
// drain the keys' next version, in time order, the columns a real
// request fills. $2 is a multiple of 500.
const seedHistorySQL = `INSERT INTO syncer_history_requests
	(feed, at, batched_at, batch_key, destination, status, latency_ms, keys, versions, captured, items)
	SELECT 'resources', t, t, 'syncer-' || md5(r::text), 'default', 200, 20, k.keys,
		array_fill((r / ($2 / 500) + 1)::bigint, ARRAY[500]), array_fill(t - interval '1 second', ARRAY[500]), 500
	FROM generate_series(0, $1 / 500 - 1) r,
		LATERAL (SELECT now() - interval '6 days' + r * (interval '6 days' / ($1 / 500)) AS t) at,
		LATERAL (SELECT array_agg(lpad(((r % ($2 / 500)) * 500 + g)::text, 8, '0') ORDER BY g) AS keys
			FROM generate_series(0, 499) g) k`

// pendingHistorySQL writes $1 more requests of 500 keys, next versions of
// the first keys, now: the most requests the Pruner leaves unindexed
// (history.TidyRequestsDefault).
const pendingHistorySQL = `INSERT INTO syncer_history_requests
	(feed, at, batched_at, batch_key, destination, status, latency_ms, keys, versions, items)
	SELECT 'resources', now(), now(), 'syncer-p' || r, 'default', 200, 20, k.keys, array_fill(1000::bigint, ARRAY[500]), 500
	FROM generate_series(0, $1 - 1) r,
		LATERAL (SELECT array_agg(lpad((r * 500 + g)::text, 8, '0') ORDER BY g) AS keys FROM generate_series(0, 499) g) k`

func (r *runner) historyLookup(ctx context.Context) (Row, error) {
	sz := r.historySizes()
	s, err := r.newScratch(ctx, "history-lookup", false)
	if err != nil {
		return Row{}, err
	}
	defer s.drop(ctx)
	r.progressf("   seeding %s history entries over %s keys", count(float64(sz.entries)), count(float64(sz.keys)))
	start := time.Now()
	if _, err := s.pool.Exec(ctx, seedHistorySQL, sz.entries, sz.keys); err != nil {
		return Row{}, fmt.Errorf("bench: seed history: %w", err)
	}
	p, err := history.NewPruner(s.pool, nil)
	if err != nil {
		return Row{}, err
	}
	if _, err := p.Tidy(ctx); err != nil {
		return Row{}, err
	}
	if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE syncer_history_requests`); err != nil {
		return Row{}, fmt.Errorf("bench: analyze history: %w", err)
	}
	r.note("history lookup: seeding %s entries took %.1f s", count(float64(sz.entries)), time.Since(start).Seconds())
	tidy, err := r.lookups(ctx, s, sz)
	if err != nil {
		return Row{}, err
	}
	// The same with as many keys not indexed yet as the Pruner lets wait.
	if _, err := s.pool.Exec(ctx, pendingHistorySQL, sz.pending); err != nil {
		return Row{}, fmt.Errorf("bench: pending history: %w", err)
	}
	pending, err := r.lookups(ctx, s, sz)
	if err != nil {
		return Row{}, err
	}
	p99 := max(tidy.p99, pending.p99)
	return Row{
		Scenario: "history lookup",
		Measured: fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (%d keys looked up, %.0f entries each); with %s keys not indexed yet: p50 %.1f ms, p99 %.1f ms",
			msf(tidy.p50), msf(tidy.p99), sz.lookups, tidy.entries, count(float64(sz.pending*500)), msf(pending.p50), msf(pending.p99)),
		Baseline: fmt.Sprintf("%s entries kept (requests of 500)", count(float64(sz.entries))),
		Figure:   fmt.Sprintf("%.1f ms", msf(p99)),
		Target:   "<= 50 ms",
		Pass:     p99 <= 50*time.Millisecond,
		Values: map[string]float64{"entries": float64(sz.entries), "p50_ms": msf(tidy.p50), "p99_ms": msf(tidy.p99),
			"pending_keys": float64(sz.pending * 500), "pending_p50_ms": msf(pending.p50), "pending_p99_ms": msf(pending.p99)},
	}, nil
}

// lookupTimes are a round of lookups' quantiles and entries a key.
type lookupTimes struct {
	p50, p99 time.Duration
	entries  float64
}

// lookups looks up sz.lookups keys at random.
func (r *runner) lookups(ctx context.Context, s *scratch, sz historySizes) (lookupTimes, error) {
	var took []time.Duration
	var entries int
	for range sz.lookups {
		key := fmt.Sprintf("%08d", rand.IntN(sz.keys))
		t0 := time.Now()
		st, err := history.Lookup(ctx, s.pool, "resources", key, 0)
		if err != nil {
			return lookupTimes{}, err
		}
		took = append(took, time.Since(t0))
		for _, v := range st.Versions {
			entries += len(v.Entries)
		}
	}
	slices.Sort(took)
	return lookupTimes{p50: took[len(took)/2], p99: took[len(took)*99/100], entries: float64(entries) / float64(sz.lookups)}, nil
}
