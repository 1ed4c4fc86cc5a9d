package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Real third-party APIs answer in tens or hundreds of milliseconds and keep
// limits of their own, announced or not. These scenarios run the daemon
// against the fake made to behave so, and compare each figure with the ideal
// the third party allows, computed from its own settings.

// realAPISizes are the amounts of the real-API scenarios.
type realAPISizes struct {
	slowRows     int           // rows drained against 100 ms answers
	unknownFor   time.Duration // how long the unknown limit is pushed against
	unknownFrom  time.Duration // when its measure starts
	quotaBatches int           // requests sent against the advertised quota
}

func (r *runner) realAPISizes() realAPISizes {
	if r.cfg.Size == SizeTiny {
		return realAPISizes{slowRows: 4_000, unknownFor: 6 * time.Second, unknownFrom: 3 * time.Second, quotaBatches: 40}
	}
	return realAPISizes{slowRows: 40_000, unknownFor: 40 * time.Second, unknownFrom: 15 * time.Second, quotaBatches: 300}
}

// realAPIRun drains n preloaded rows through a daemon against a fake with
// cfg, and returns the fake and when the drain ended.
func (r *runner) realAPIRun(ctx context.Context, label string, n int, cfg fakethirdparty.Config, limit time.Duration, flags ...string) (*fake, time.Time, error) {
	s, err := r.newScratch(ctx, label, false)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer s.drop(ctx)
	if err := s.preload(ctx, n); err != nil {
		return nil, time.Time{}, err
	}
	cfg.ExpectedItems = n
	f, err := startFakeWith(cfg)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.close()
	d, err := r.startDaemon(ctx, s, f, false, flags...)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer d.stop()
	end, err := s.waitDrained(ctx, f.Server, int64(n), limit)
	if err != nil {
		return f, end, err
	}
	return f, end, d.stop()
}

// slowAPI: 100 ms a request, batches of 500, 4 in flight: the third party
// allows 4 × 500 / 0.1 s = 20,000 rows/s.
func (r *runner) slowAPI(ctx context.Context) ([]Row, error) {
	n := r.realAPISizes().slowRows
	const latency, batch, inFlight = 100 * time.Millisecond, 500, 4
	ideal := float64(inFlight*batch) / latency.Seconds()
	rate := func(flight int) (float64, int64, error) {
		r.progressf("   slow API, %d in flight: %s rows, %s per answer", flight, count(float64(n)), latency)
		f, end, err := r.realAPIRun(ctx, "slow-api", n, fakethirdparty.Config{Latency: latency}, drainLimit(n)+time.Duration(n/batch)*latency,
			"--batch-size", strconv.Itoa(batch), "--max-in-flight", strconv.Itoa(flight))
		if err != nil {
			return 0, 0, err
		}
		st := f.Stats()
		return float64(n) / end.Sub(st.FirstRequestAt).Seconds(), st.MaxInFlight, nil
	}
	got, most, err := rate(inFlight)
	if err != nil {
		return nil, err
	}
	one, _, err := rate(1)
	if err != nil {
		return nil, err
	}
	r.note("slow API: with 1 request in flight (before this change) the same drain ran at %s rows/s: %.1fx slower", count(one), got/one)
	ratio := got / ideal
	return []Row{{
		Scenario: "slow API",
		Measured: fmt.Sprintf("%s rows/s (%s rows; at most %d requests in flight at the fake)", count(got), count(float64(n)), most),
		Baseline: fmt.Sprintf("ideal %s rows/s (4 × 500 rows / 100 ms)", count(ideal)),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.75x, never > 4 in flight",
		Pass:     ratio >= 0.75 && most <= inFlight,
		Values:   map[string]float64{"rows_per_s": got, "ideal_rows_per_s": ideal, "ratio": ratio, "max_in_flight": float64(most), "one_in_flight_rows_per_s": one},
	}}, nil
}

// unknownLimit: the third party allows 20 requests/s and says so only with
// bare 429s; no limit is configured. From unknownFrom on, the accepted rate
// and the share of 429s are measured.
func (r *runner) unknownLimit(ctx context.Context) ([]Row, error) {
	sz := r.realAPISizes()
	const allowed, batch = 20.0, 20
	// More rows than the run can send, so the daemon pushes all along.
	n := int(allowed*1.5*sz.unknownFor.Seconds()) * batch
	r.progressf("   unknown limit: the fake allows %.0f requests/s, bare 429 beyond; %s", allowed, sz.unknownFor)
	s, err := r.newScratch(ctx, "unknown-limit", false)
	if err != nil {
		return nil, err
	}
	defer s.drop(ctx)
	if err := s.preload(ctx, n); err != nil {
		return nil, err
	}
	f, err := startFakeWith(fakethirdparty.Config{UnannouncedLimit: allowed, ExpectedItems: n})
	if err != nil {
		return nil, err
	}
	defer f.close()
	d, err := r.startDaemon(ctx, s, f, false, "--batch-size", strconv.Itoa(batch))
	if err != nil {
		return nil, err
	}
	defer d.stop()
	select {
	case <-time.After(sz.unknownFor):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	reqs := f.Requests()
	if err := d.stop(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("bench: unknown limit: no request reached the fake")
	}
	perSec, share, total, err := acceptedRate(reqs, reqs[0].At.Add(sz.unknownFrom))
	if err != nil {
		return nil, fmt.Errorf("bench: unknown limit: no request after %s", sz.unknownFrom)
	}
	return []Row{{
		Scenario: "unknown limit",
		Measured: fmt.Sprintf("%.1f accepted requests/s, %.1f%% answered 429 (from %s on)", perSec, 100*share, sz.unknownFrom),
		Baseline: fmt.Sprintf("the fake allows %.0f requests/s, unannounced", allowed),
		Figure:   fmt.Sprintf("%.1f/s, %.1f%%", perSec, 100*share),
		Target:   ">= 17/s, <= 5% 429",
		Pass:     perSec >= 17 && share <= 0.05,
		Values:   map[string]float64{"accepted_per_s": perSec, "share_429": share, "requests": float64(total)},
	}}, nil
}

// advertisedQuota: 30 requests per 3 s, announced in RateLimit-* headers;
// no limit configured. Ideal: the quota's own pace.
func (r *runner) advertisedQuota(ctx context.Context) ([]Row, error) {
	batches := r.realAPISizes().quotaBatches
	const quota, window, batch = 30, 3 * time.Second, 20
	n := batches * batch
	ideal := time.Duration(float64(batches) / quota * float64(window))
	r.progressf("   advertised quota: %d requests per %s in headers; %d requests", quota, window, batches)
	f, end, err := r.realAPIRun(ctx, "quota", n, fakethirdparty.Config{Quota: quota, QuotaWindow: window}, 3*ideal+time.Minute,
		"--batch-size", strconv.Itoa(batch))
	if err != nil {
		return nil, err
	}
	st := f.Stats()
	took := end.Sub(st.FirstRequestAt)
	ratio := took.Seconds() / ideal.Seconds()
	return []Row{{
		Scenario: "advertised quota",
		Measured: fmt.Sprintf("%d requests in %s; %d sent over an exhausted quota", batches, took.Round(100*time.Millisecond), st.OverQuota),
		Baseline: fmt.Sprintf("the quota's time %s (%d per %s)", ideal, quota, window),
		Figure:   fmt.Sprintf("%.2fx the time, %d over", ratio, st.OverQuota),
		Target:   "<= 1.35x, <= 2 over",
		Pass:     ratio <= 1.35 && st.OverQuota <= 2,
		Values:   map[string]float64{"seconds": took.Seconds(), "ideal_seconds": ideal.Seconds(), "ratio": ratio, "over_quota": float64(st.OverQuota)},
	}}, nil
}
