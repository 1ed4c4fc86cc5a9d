package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// lateFrom is where the unannounced rows' "after the first 15 s" begins,
// past the run's first request.
const lateFrom = 15 * time.Second

// timelineStep is the step of a limits run's timeline in the progress.
const timelineStep = 2500 * time.Millisecond

// tenantLimitRun is a drain of tenants × rows against accounts limited to 5
// requests/s each (a bare 429 beyond), destYAML added to the destination.
type tenantLimitRun struct {
	took          time.Duration // first request to last
	okRate        float64       // 200s a second over took
	steady        tenantWindow  // while every tenant sends (steadyWindow)
	hasSteady     bool
	lateShare     float64 // 429s' share of the requests after lateFrom; -1 if none
	refused       int     // every 429
	overOneSecond int64   // the most one account accepted in a second
	spread        string  // tenantSpread's
}

// steadyRate is the run's figure: its steady window's rate, or the whole
// run's when it had none.
func (l tenantLimitRun) steadyRate() float64 {
	if l.hasSteady {
		return l.steady.rate()
	}
	return l.okRate
}

// steadyText says the steady window and its rate beside the whole run's.
func (l tenantLimitRun) steadyText(from string) string {
	if !l.hasSteady {
		return fmt.Sprintf("no window where every tenant sends: over the whole run %s accepted req/s in %.1fs", count(l.okRate), l.took.Seconds())
	}
	return fmt.Sprintf("%s accepted req/s from %.2fs (%s) to %.2fs (the first tenant's last request); whole run %s req/s in %.1fs",
		count(l.steady.rate()), l.steady.from.Seconds(), from, l.steady.to.Seconds(), count(l.okRate), l.took.Seconds())
}

func (r *runner) limitDrain(ctx context.Context, label, destYAML string, rows int, learned bool) (tenantLimitRun, error) {
	var res tenantLimitRun
	tenants := r.tenantSizes().limitTenants
	f, tap, urls, err := startTappedFake(fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{RateLimit: 5}}, 1)
	if err != nil {
		return res, err
	}
	defer f.close()
	dir, err := os.MkdirTemp("", "syncer-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	s, path, err := r.tenantScratch(ctx, label, dir, tenantSetup{url: urls[0] + "/t/{tenant}", destYAML: destYAML, tenantCol: true, batch: 10})
	if err != nil {
		return res, err
	}
	defer s.drop(ctx)
	if err := s.preloadTenants(ctx, "t", tenants, rows); err != nil {
		return res, err
	}
	r.progressf("   %s: %d tenants × %d rows, 5 requests/s each account", label, tenants, rows)
	d, err := r.startDaemon(ctx, s, f, false, "--config", path, "--thirdparty-url=")
	if err != nil {
		return res, err
	}
	defer d.stop()
	if err := s.waitChanges(ctx, drainLimit(tenants*rows)+time.Minute, d); err != nil {
		return res, err
	}
	ts := f.TenantStats()
	if got, want := ts.Total.DistinctPairs, int64(tenants*rows); got < want {
		return res, fmt.Errorf("bench: %s: the accounts hold %d rows of %d", label, got, want)
	}
	reqs := tap.requests()
	if len(reqs) == 0 {
		return res, fmt.Errorf("bench: %s: the tap saw no batch request", label)
	}
	first, last := reqs[0].at, reqs[0].at
	ok := 0
	for _, q := range reqs {
		first, last = minTime(first, q.at), maxTime(last, q.at)
		switch q.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			res.refused++
		}
	}
	res.took = last.Sub(first)
	res.okRate = float64(ok) / res.took.Seconds()
	res.steady, res.hasSteady = steadyWindow(reqs, learned)
	res.lateShare = lateShare(reqs, lateFrom)
	res.overOneSecond = ts.Total.MaxRequestsInOneSecond
	res.spread = tenantSpread(ts, ts.Total.FirstRequestAt)
	r.progressf("   %s: %s", label, res.spread)
	r.progressf("   %s: by %s: %s", label, timelineStep, timeline(reqs, timelineStep))
	return res, d.stop()
}

// tenantSpread says where a limits run's time went: when each tenant's
// first request came after the run's first (the lanes' start), and each
// tenant's own span from its first request to its last (its pacing).
func tenantSpread(ts fakethirdparty.TenantStats, first time.Time) string {
	var starts, spans []time.Duration
	for _, st := range ts.Tenants {
		starts = append(starts, st.FirstRequestAt.Sub(first))
		spans = append(spans, st.LastRequestAt.Sub(st.FirstRequestAt))
	}
	if len(starts) == 0 {
		return "no tenant answered"
	}
	slices.Sort(starts)
	slices.Sort(spans)
	q := func(d []time.Duration, f float64) float64 { return d[int(f*float64(len(d)-1))].Seconds() }
	return fmt.Sprintf("first request after the run's first: p50 %.2fs p90 %.2fs max %.2fs; a tenant's first to last: min %.2fs p50 %.2fs max %.2fs",
		q(starts, 0.5), q(starts, 0.9), q(starts, 1), q(spans, 0), q(spans, 0.5), q(spans, 1))
}

// learnedFrom and startedFrom name the steady window's start in a row.
const (
	learnedFrom = "every tenant's limit learned: its first 429 or its 6th request, its burst of 5 spent, whichever came first"
	startedFrom = "every tenant's first request"
)

// tenantLimits: the limits rows, unannounced (300 rows a tenant, then
// 1,000 for the 429s after 15 s) and with rate_limit: 5.
func (r *runner) tenantLimits(ctx context.Context) ([]Row, error) {
	sz := r.tenantSizes()
	sum := float64(sz.limitTenants * 5)
	var rows []Row
	unann, err := r.limitDrain(ctx, "tenants-unannounced", "", sz.limitRows, true)
	if err != nil {
		return rows, err
	}
	ratio := unann.steadyRate() / sum
	rows = append(rows, Row{
		Scenario: "tenants: unannounced limits",
		Measured: fmt.Sprintf("%s (%d tenants × %d rows, batches of 10; %d 429s in all; the 429s after 15 s: the sustained row)", unann.steadyText(learnedFrom), sz.limitTenants, sz.limitRows, unann.refused),
		Baseline: fmt.Sprintf("the accounts' sum %s req/s (%d × 5, bare 429 beyond)", count(sum), sz.limitTenants),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.8x once every limit is learned",
		Pass:     ratio >= 0.8,
		Values: map[string]float64{"ok_per_s": unann.steadyRate(), "whole_run_ok_per_s": unann.okRate, "sum_per_s": sum, "ratio": ratio,
			"refused": float64(unann.refused), "window_from_s": unann.steady.from.Seconds(), "window_to_s": unann.steady.to.Seconds()},
	})

	sust, err := r.limitDrain(ctx, "tenants-sustained", "", sz.sustainRows, true)
	if err != nil {
		return rows, err
	}
	ratio = sust.steadyRate() / sum
	late, figure, pass := "run shorter than 15 s: not measured", "-", false
	if sust.lateShare >= 0 {
		late = fmt.Sprintf("%.1f%% 429s after the first 15 s", 100*sust.lateShare)
		figure = fmt.Sprintf("%.1f%% 429s, %.2fx", 100*sust.lateShare, ratio)
		pass = sust.lateShare <= 0.05 && ratio >= 0.8
	}
	rows = append(rows, Row{
		Scenario: "tenants: unannounced sustained",
		Measured: fmt.Sprintf("%s (%d tenants × %d rows, batches of 10, run %.1fs; %d 429s in all); %s", late, sz.limitTenants, sz.sustainRows, sust.took.Seconds(), sust.refused, sust.steadyText(learnedFrom)),
		Baseline: fmt.Sprintf("the accounts' sum %s req/s", count(sum)),
		Figure:   figure,
		Target:   "<= 5% 429s after 15 s, >= 0.8x",
		Pass:     pass,
		Values: map[string]float64{"late_429_share": sust.lateShare, "ok_per_s": sust.steadyRate(), "whole_run_ok_per_s": sust.okRate,
			"sum_per_s": sum, "ratio": ratio, "refused": float64(sust.refused), "run_s": sust.took.Seconds()},
	})

	conf, err := r.limitDrain(ctx, "tenants-configured", "    rate_limit: 5\n", sz.limitRows, false)
	if err != nil {
		return rows, err
	}
	ratio = conf.steadyRate() / sum
	rows = append(rows, Row{
		Scenario: "tenants: rate_limit 5",
		Measured: fmt.Sprintf("%s (rate_limit: 5 each; %d 429s; at most %d accepted in one second by one account)", conf.steadyText(startedFrom), conf.refused, conf.overOneSecond),
		Baseline: fmt.Sprintf("the accounts' sum %s req/s", count(sum)),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.9x, no account over its limit (0 429s)",
		Pass:     ratio >= 0.9 && conf.refused == 0,
		Values: map[string]float64{"ok_per_s": conf.steadyRate(), "whole_run_ok_per_s": conf.okRate, "sum_per_s": sum, "ratio": ratio,
			"refused": float64(conf.refused), "window_from_s": conf.steady.from.Seconds(), "window_to_s": conf.steady.to.Seconds()},
	})
	return rows, nil
}
