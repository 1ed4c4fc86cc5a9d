package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// tenantTwoDaemons: two daemons on one tenant source drain a backlog of
// the rate_limit 5 row's size together; each sends through a door of its
// own onto the same fake (tenantTap), so each one's requests are counted
// where they arrive. Both run, say so in syncer_daemons and pass their
// lanes' first run limit before the backlog is written: the first daemon
// up takes every lane before the other runs, a start the row is not about
// (the daemons run side by side when a backlog comes).
func (r *runner) tenantTwoDaemons(ctx context.Context) (Row, error) {
	sz := r.tenantSizes()
	const label = "tenants-two"
	two, err := r.twoDaemonSetup(ctx, label)
	if err != nil {
		return Row{}, err
	}
	defer two.close(ctx)
	f, tap, s, paths := two.f, two.tap, two.s, two.paths
	r.progressf("   %s: two daemons, %d tenants × %d rows, rate_limit: 5 and 5 requests/s each account", label, sz.limitTenants, sz.limitRows)
	var ds [2]*daemon
	started := make(chan error, 2)
	for n := range 2 {
		go func() {
			var err error
			ds[n], err = r.startDaemon(ctx, s, f, false, "--config", paths[n], "--thirdparty-url=")
			started <- err
		}()
	}
	for range 2 {
		err = cmp.Or(err, <-started)
	}
	for _, d := range ds {
		if d != nil {
			defer d.stop()
		}
	}
	if err != nil {
		return Row{}, err
	}
	if err := s.waitDaemons(ctx, "crm", 2, 30*time.Second); err != nil {
		return Row{}, err
	}
	// The first daemon up took every lane before the second said it runs;
	// it gives lanes up as their jobs find it over its share, or at their
	// run limit when idle, and from then on the lanes spread over both:
	// the row measures that steady state (the join row, a daemon that
	// starts during a drain).
	settle := twoSettle
	if r.cfg.Size == SizeTiny && r.cfg.TenantScale <= 0 {
		// The tiny run (CI's) says the row works, in seconds: its
		// shares are those of the daemons' start.
		settle = 0
	}
	r.progressf("   %s: both daemons up; the backlog in %s, past the lanes' first run limit (%s)", label, settle, exporter.MaxRunDefault)
	select {
	case <-ctx.Done():
		return Row{}, ctx.Err()
	case <-time.After(settle):
	}
	r.progressf("   %s: lanes running at the backlog, by River client: %s", label, s.lanesByClient(ctx))
	if err := s.preloadTenants(ctx, "t", sz.limitTenants, sz.limitRows); err != nil {
		return Row{}, err
	}
	total := sz.limitTenants * sz.limitRows
	if err := s.waitChanges(ctx, drainLimit(total)+time.Minute, ds[0]); err != nil {
		return Row{}, err
	}
	if got := f.TenantStats().Total.DistinctPairs; got < int64(total) {
		return Row{}, fmt.Errorf("bench: %s: the accounts hold %d rows of %d", label, got, total)
	}
	reqs := tap.requests()
	var by [2]int
	first, last := time.Time{}, time.Time{}
	for _, q := range reqs {
		by[q.door]++
		if first.IsZero() || q.at.Before(first) {
			first = q.at
		}
		last = maxTime(last, q.at)
	}
	all := by[0] + by[1]
	if all == 0 {
		return Row{}, fmt.Errorf("bench: %s: the tap saw no batch request", label)
	}
	shareA, shareB := float64(by[0])/float64(all), float64(by[1])/float64(all)
	least := min(shareA, shareB)
	for _, d := range ds {
		if err := d.stop(); err != nil {
			return Row{}, err
		}
	}
	took := last.Sub(first)
	return Row{
		Scenario: "tenants: two daemons",
		Measured: fmt.Sprintf("A sent %d requests (%.0f%%), B %d (%.0f%%): %d tenants × %d rows, rate_limit: 5, drained in %.1fs (%s req/s); the backlog written %s after both were up",
			by[0], 100*shareA, by[1], 100*shareB, sz.limitTenants, sz.limitRows, took.Seconds(), count(float64(all)/took.Seconds()), settle),
		Baseline: "an even share, 50% each",
		Figure:   fmt.Sprintf("%.0f%% least", 100*least),
		Target:   ">= 30% each",
		Pass:     least >= 0.3,
		Values:   map[string]float64{"share_a": shareA, "share_b": shareB, "requests_a": float64(by[0]), "requests_b": float64(by[1]), "took_s": took.Seconds()},
	}, nil
}

// twoSetup is what the rows of two daemons run: a fake with two doors
// (tenantTap), a scratch database and one configuration a daemon, the
// same but for the door, so each one's requests are counted where they
// arrive.
type twoSetup struct {
	f     *fake
	tap   *tenantTap
	s     *scratch
	paths [2]string
	dir   string
}

func (r *runner) twoDaemonSetup(ctx context.Context, label string) (_ *twoSetup, err error) {
	two := &twoSetup{}
	defer func() {
		if err != nil {
			two.close(ctx)
		}
	}()
	var urls []string
	if two.f, two.tap, urls, err = startTappedFake(fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{RateLimit: 5}}, 2); err != nil {
		return nil, err
	}
	if two.dir, err = os.MkdirTemp("", "syncer-bench-"); err != nil {
		return nil, err
	}
	for n := range 2 {
		sub := filepath.Join(two.dir, fmt.Sprint(n))
		if err := os.Mkdir(sub, 0o700); err != nil {
			return nil, err
		}
		ts := tenantSetup{url: urls[n] + "/t/{tenant}", destYAML: "    rate_limit: 5\n", tenantCol: true, batch: 10}
		if n == 0 {
			two.s, two.paths[0], err = r.tenantScratch(ctx, label, sub, ts)
		} else {
			two.paths[1], err = writeTenantConfig(sub, ts)
		}
		if err != nil {
			return nil, err
		}
	}
	return two, nil
}

func (two *twoSetup) close(ctx context.Context) {
	if two.s != nil {
		two.s.drop(ctx)
	}
	if two.dir != "" {
		os.RemoveAll(two.dir)
	}
	if two.f != nil {
		two.f.close()
	}
}

// twoSettle is how long the two daemons run before the backlog comes.
const twoSettle = exporter.MaxRunDefault + 5*time.Second

// lanesByClient says how many lane jobs each River client runs.
func (s *scratch) lanesByClient(ctx context.Context) string {
	rows, err := s.pool.Query(ctx, `SELECT attempted_by[array_length(attempted_by, 1)], count(*) FROM river_job
		WHERE kind = $1 AND state = 'running' AND args->>'source' LIKE '%@%' GROUP BY 1 ORDER BY 1`, jobs.ExportArgs{}.Kind())
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var client string
		var n int
		if err := rows.Scan(&client, &n); err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("%s %d", client, n))
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// waitDaemons waits until n daemons say they run for destination
// (syncer_daemons, as presence.Alive counts them), up to limit.
func (s *scratch) waitDaemons(ctx context.Context, destination string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var alive int
		if err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT daemon) FROM syncer_daemons
			WHERE destination = $1 AND seen_until > now()`, destination).Scan(&alive); err != nil {
			return fmt.Errorf("bench: count the daemons: %w", err)
		}
		if alive >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d daemons of %d say they run after %s", alive, n, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
