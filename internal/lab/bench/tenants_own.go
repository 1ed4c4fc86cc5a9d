package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Each tenant's own limit (issue 54 point 14, contract 10.1):
//
//   - tenants: own limits sharing lanes: 8 tenants in 2 lanes, each with a
//     backlog, rate_limit: 4 on the destination: each tenant's accepted
//     requests/s while every tenant has rows, against its 4. Target: each
//     >= 0.9x.
//   - tenants: own limits from the query: 200 tenants whose connection
//     rows give rate_limit 2, 5 and 10 in turn, each with a backlog of
//     about ownDrainFor at its limit: the same, each against its own.
//     Target: each >= 0.9x.
//
// The accounts themselves are unlimited: the limits are syncer's.

// ownDrainFor is how long a tenant's backlog lasts at its limit.
const ownDrainFor = 12 * time.Second

// ownLimitRun is what a drain of tenants at their own limits measured.
type ownLimitRun struct {
	window          time.Duration
	worst, median   float64 // ratios of a tenant's rate to its limit
	worstTenant     string
	worstRate       float64
	below           int // tenants under 0.9x
	tenants, lanes  int
	requests, other int // 200s in all; answers other than 200
	byLimit         string
}

// ownLimitDrain drains tenants t0..t(n-1), tenant i limited to limits(i)
// (from its connection row when fromQuery, else destination rate_limit
// limits(0)), each with limits(i) × ownDrainFor batches of 10.
func (r *runner) ownLimitDrain(ctx context.Context, label string, n, lanes int, limits func(int) float64, fromQuery bool) (ownLimitRun, error) {
	res := ownLimitRun{tenants: n, lanes: lanes}
	f, tap, urls, err := startTappedFake(fakethirdparty.Config{}, 1)
	if err != nil {
		return res, err
	}
	defer f.close()
	dir, err := os.MkdirTemp("", "syncer-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	setup := tenantSetup{url: urls[0] + "/t/{tenant}", tenantCol: true, batch: 10, sourceYAML: fmt.Sprintf("    lanes: %d\n", lanes)}
	if fromQuery {
		setup.tenantsYAML = "    tenants:\n      query: SELECT rate_limit FROM connections WHERE account_id = $1\n"
	} else {
		setup.destYAML = fmt.Sprintf("    rate_limit: %g\n", limits(0))
	}
	s, path, err := r.tenantScratch(ctx, label, dir, setup)
	if err != nil {
		return res, err
	}
	defer s.drop(ctx)
	seconds := ownDrainFor.Seconds()
	if r.cfg.Size == SizeTiny && r.cfg.TenantScale <= 0 {
		seconds = 5
	}
	limitOf := map[string]float64{}
	var names []string
	var lims []float64
	var rows []int
	total := 0
	for i := range n {
		name, l := fmt.Sprintf("t%d", i), limits(i)
		limitOf[name] = l
		names, lims = append(names, name), append(lims, l)
		rows = append(rows, int(math.Round(l*seconds))*10)
		total += rows[i]
	}
	if _, err := s.pool.Exec(ctx, `ALTER TABLE connections ADD COLUMN rate_limit numeric`); err != nil {
		return res, fmt.Errorf("bench: %s: connections: %w", label, err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO connections SELECT * FROM unnest($1::text[], $2::numeric[])`, names, lims); err != nil {
		return res, fmt.Errorf("bench: %s: connections: %w", label, err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO contacts (account, status, total)
		SELECT t.name, 'new', i % 1000 FROM unnest($1::text[], $2::int[]) AS t(name, rows), generate_series(1, t.rows) i`, names, rows); err != nil {
		return res, fmt.Errorf("bench: %s: preload: %w", label, err)
	}
	for _, sql := range []string{`VACUUM (ANALYZE) contacts`, `VACUUM (ANALYZE) syncer_changes`} {
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			return res, fmt.Errorf("bench: vacuum: %w", err)
		}
	}
	r.progressf("   %s: %d tenants in %d lanes, %d rows, backlogs of %.0fs at each tenant's limit", label, n, lanes, total, seconds)
	profile := r.cfg.ProfileDir != ""
	d, err := r.startDaemon(ctx, s, f, profile, "--config", path, "--thirdparty-url=")
	if err != nil {
		return res, err
	}
	defer d.stop()
	// With ProfileDir, a CPU profile of the daemon over most of the
	// backlogs ("tenants-own-query.cpu.pprof").
	var profiled chan error
	if profile {
		profiled = make(chan error, 1)
		go func() {
			profiled <- d.profile(ctx, max(int(seconds*2/3), 1), filepath.Join(r.cfg.ProfileDir, label+".cpu.pprof"))
		}()
	}
	pool0 := poolWaits(ctx, d)
	if err := s.waitChanges(ctx, drainLimit(total)+time.Minute, d); err != nil {
		return res, err
	}
	if pool1 := poolWaits(ctx, d); pool0.ok && pool1.ok {
		// The pool's share of the lanes' waits (issue 54): its acquires
		// over the drain, those that waited, and their wait.
		r.progressf("   %s: pool: %.0f acquires, %.0f waited, %.1f s waiting", label,
			pool1.acquires-pool0.acquires, pool1.waited-pool0.waited, pool1.seconds-pool0.seconds)
	}
	if profiled != nil {
		if err := <-profiled; err != nil {
			return res, err
		}
	}
	// The window: every tenant has sent (a second more for the lanes'
	// start), and none has drained yet.
	type span struct {
		first, last time.Time
		ok          []time.Time
	}
	by := map[string]*span{}
	for _, q := range tap.requests() {
		sp := by[q.tenant]
		if sp == nil {
			sp = &span{first: q.at, last: q.at}
			by[q.tenant] = sp
		}
		sp.first, sp.last = minTime(sp.first, q.at), maxTime(sp.last, q.at)
		if q.status == http.StatusOK {
			sp.ok = append(sp.ok, q.at)
			res.requests++
		} else {
			res.other++
		}
	}
	if len(by) < n {
		return res, fmt.Errorf("bench: %s: %d tenants of %d sent", label, len(by), n)
	}
	var from, to time.Time
	for _, sp := range by {
		from = maxTime(from, sp.first)
		if to.IsZero() || sp.last.Before(to) {
			to = sp.last
		}
	}
	from = from.Add(time.Second)
	if !to.After(from) {
		return res, fmt.Errorf("bench: %s: no window where every tenant sends", label)
	}
	res.window = to.Sub(from)
	var ratios []float64
	byLimit := map[float64][]float64{}
	res.worst = math.Inf(1)
	var timelines []ownTimeline
	var start time.Time
	for _, sp := range by {
		if start.IsZero() || sp.first.Before(start) {
			start = sp.first
		}
	}
	for name, sp := range by {
		k := 0
		for _, at := range sp.ok {
			if !at.Before(from) && at.Before(to) {
				k++
			}
		}
		rate := float64(k) / res.window.Seconds()
		ratio := rate / limitOf[name]
		ratios = append(ratios, ratio)
		byLimit[limitOf[name]] = append(byLimit[limitOf[name]], ratio)
		if ratio < res.worst {
			res.worst, res.worstTenant, res.worstRate = ratio, name, rate
		}
		if ratio < 0.9 {
			res.below++
		}
		slices.SortFunc(sp.ok, func(a, b time.Time) int { return a.Compare(b) })
		timelines = append(timelines, ownTimeline{name: name, limit: limitOf[name], lane: laneOf(name, lanes), ok: sp.ok,
			inWindow: k, ratio: ratio, first: sp.first, last: sp.last})
	}
	slices.Sort(ratios)
	res.median = ratios[len(ratios)/2]
	var parts []string
	for l, rs := range byLimit {
		slices.Sort(rs)
		parts = append(parts, fmt.Sprintf("at %g/s min %.2fx median %.2fx (%d)", l, rs[0], rs[len(rs)/2], len(rs)))
	}
	slices.Sort(parts)
	res.byLimit = strings.Join(parts, ", ")
	r.progressf("   %s: over %.1fs: worst %s %.2f/s (%.2fx of %g), median %.2fx, %d below 0.9x; %s", label, res.window.Seconds(),
		res.worstTenant, res.worstRate, res.worst, limitOf[res.worstTenant], res.median, res.below, res.byLimit)
	// Where the slowest tenants' requests went (issue 54): times after
	// the run's first request.
	r.progressf("   %s: window %.2fs to %.2fs", label, from.Sub(start).Seconds(), to.Sub(start).Seconds())
	for _, line := range ownTimelinesText(timelines, lanes, start, from, to, 4) {
		r.progressf("   %s: %s", label, line)
	}
	return res, d.stop()
}

// The rows' names.
const (
	ownSharedRow = "tenants: own limits sharing lanes"
	ownQueryRow  = "tenants: own limits from the query"
)

// ownRow is the row of a drain of tenants at their own limits.
func ownRow(name, what string, o ownLimitRun) Row {
	return Row{
		Scenario: name,
		Measured: fmt.Sprintf("the slowest tenant %s at %.2f req/s, %.2fx of its own limit; median %.2fx; %d of %d tenants below 0.9x; %s (%s, %d lanes, batches of 10, over %.1fs while every tenant had a backlog; %d accepted requests, %d other answers)",
			o.worstTenant, o.worstRate, o.worst, o.median, o.below, o.tenants, o.byLimit, what, o.lanes, o.window.Seconds(), o.requests, o.other),
		Baseline: "each tenant's own limit",
		Figure:   fmt.Sprintf("%.2fx", o.worst),
		Target:   ">= 0.9x for each tenant",
		Pass:     o.below == 0,
		Values: map[string]float64{"worst_ratio": o.worst, "median_ratio": o.median, "below": float64(o.below),
			"tenants": float64(o.tenants), "window_s": o.window.Seconds()},
	}
}

// tenantOwnShared: 8 tenants in 2 lanes at the destination's 4/s.
func (r *runner) tenantOwnShared(ctx context.Context) ([]Row, error) {
	shared, err := r.ownLimitDrain(ctx, "tenants-own-shared", 8, 2, func(int) float64 { return 4 }, false)
	if err != nil {
		return nil, err
	}
	return []Row{ownRow(ownSharedRow, "8 tenants, rate_limit: 4 on the destination", shared)}, nil
}

// tenantOwnQuery: 200 tenants in 16 lanes at 2, 5 and 10/s from the
// tenants query.
func (r *runner) tenantOwnQuery(ctx context.Context) ([]Row, error) {
	n := 200
	if r.cfg.TenantScale > 0 {
		n = max(6, int(math.Round(200*r.cfg.TenantScale)))
	} else if r.cfg.Size == SizeTiny {
		n = 6
	}
	mixed := []float64{2, 5, 10}
	q, err := r.ownLimitDrain(ctx, "tenants-own-query", n, 16, func(i int) float64 { return mixed[i%3] }, true)
	if err != nil {
		return nil, err
	}
	return []Row{ownRow(ownQueryRow, fmt.Sprintf("%d tenants, rate_limit 2, 5 and 10 in turn from the tenants query", n), q)}, nil
}
