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
//     median of its runs. Target: at least 0.95x.
//   - "history lookup": a key's story read by history.Lookup (what
//     `syncer history` and the console run) among historyEntries entries
//     seeded in SQL with generate_series, spread over a million keys, the
//     table analyzed as autovacuum would. Target: p99 at most 50 ms.

// historySizes are the scenario's amounts.
type historySizes struct {
	drainRows, repeats int
	entries, keys      int
	lookups            int
}

func (r *runner) historySizes() historySizes {
	if r.cfg.Size == SizeTiny {
		return historySizes{drainRows: 3_000, repeats: 1, entries: 100_000, keys: 10_000, lookups: 50}
	}
	return historySizes{drainRows: 100_000, repeats: 3, entries: 10_000_000, keys: 1_000_000, lookups: 500}
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

// seedHistorySQL writes $1 entries over $2 keys, as a drain's would be:
// one accepted entry a version, with the columns a real entry fills, in
// time order. A key's entries are written one after the other, so the
// key index fills from left to right as it would from a drain of new
// rows, and ten million entries take a minute or two, not many.
const seedHistorySQL = `INSERT INTO syncer_history
	(feed, key, version, at, batched_at, batch_key, destination, status, latency_ms, outcome)
	SELECT 'resources', lpad((g / ($1 / $2))::text, 8, '0'), g % ($1 / $2) + 1,
		now() - interval '6 days' + (g * (interval '6 days' / $1)),
		now() - interval '6 days' + (g * (interval '6 days' / $1)),
		'syncer-' || md5((g / 500)::text), 'default', 200, 20, 'accepted'
	FROM generate_series(0, $1 - 1) g`

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
	if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE syncer_history`); err != nil {
		return Row{}, fmt.Errorf("bench: analyze history: %w", err)
	}
	r.note("history lookup: seeding %s entries took %.1f s", count(float64(sz.entries)), time.Since(start).Seconds())
	var took []time.Duration
	var entries int
	for range sz.lookups {
		key := fmt.Sprintf("%08d", rand.IntN(sz.keys))
		t0 := time.Now()
		st, err := history.Lookup(ctx, s.pool, "resources", key, 0)
		if err != nil {
			return Row{}, err
		}
		took = append(took, time.Since(t0))
		for _, v := range st.Versions {
			entries += len(v.Entries)
		}
	}
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[len(took)*99/100]
	return Row{
		Scenario: "history lookup",
		Measured: fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (%d keys looked up, %.0f entries each)", msf(p50), msf(p99), sz.lookups, float64(entries)/float64(sz.lookups)),
		Baseline: fmt.Sprintf("%s entries kept", count(float64(sz.entries))),
		Figure:   fmt.Sprintf("%.1f ms", msf(p99)),
		Target:   "<= 50 ms",
		Pass:     p99 <= 50*time.Millisecond,
		Values:   map[string]float64{"entries": float64(sz.entries), "p50_ms": msf(p50), "p99_ms": msf(p99)},
	}, nil
}
