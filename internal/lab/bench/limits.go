package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 22's rows: a daemon that starts cold against a third party whose
// limit it does not know (bare 429s beyond it, and a small burst that
// refuses a fresh client's first requests within milliseconds), the same
// with a daemon restarted midway, and a successor that takes an open
// breaker over. Each figure is measured at the fake, from its own record of
// requests.

// limitSizes are the amounts of the learning scenarios.
type limitSizes struct {
	run       time.Duration // how long the limit is pushed against
	from      time.Duration // when the measure starts, after the first request
	restartAt time.Duration // when the restart row restarts the daemon
	settle    time.Duration // after the restart, when its measure starts
	coldRows  int           // the cold start's backlog
	// breakerOpen is the handover's open period; handoverGap how long
	// after the predecessor's breaker opened it is killed.
	breakerOpen time.Duration
	handoverGap time.Duration
	// judge is false at SizeTiny: the runs are too short to mean anything.
	judge bool
}

func (r *runner) limitSizes() limitSizes {
	if r.cfg.Size == SizeTiny {
		return limitSizes{run: 6 * time.Second, from: 2 * time.Second, restartAt: 2 * time.Second, settle: time.Second,
			coldRows: 1_600, breakerOpen: 2 * time.Second, handoverGap: time.Second}
	}
	return limitSizes{run: 40 * time.Second, from: 15 * time.Second, restartAt: 20 * time.Second, settle: 5 * time.Second,
		coldRows: 16_000, breakerOpen: 10 * time.Second, handoverGap: 5 * time.Second, judge: true}
}

// The cold start's third party: 20 requests/s, a burst of 2, bare 429s.
const (
	coldLimit = 20.0
	coldBurst = 2
	coldBatch = 20
	coldOK    = 17.0 // accepted requests/s from the measure's start on
	fastLimit = 200.0
	fastBurst = 10
	fastShare = 0.85 // of fastLimit
	most429   = 0.05
)

// limitRun is what the fake saw of a run against its limit.
type limitRun struct {
	reqs  []fakethirdparty.Request
	first time.Time // the first request
	// restarted is when the second daemon started; zero without a restart.
	restarted time.Time
	// rate is the learnt rate as the last daemon stored it.
	rate breakerstore.Rate
}

// runAgainstLimit preloads rows, starts a fresh daemon against a fake with
// cfg and lets it push for run after its first request; with restartAt it
// stops the daemon (SIGTERM) at that time and starts another.
func (r *runner) runAgainstLimit(ctx context.Context, label string, rows int, cfg fakethirdparty.Config, run, restartAt time.Duration, flags ...string) (limitRun, error) {
	var res limitRun
	s, err := r.newScratch(ctx, label, false)
	if err != nil {
		return res, err
	}
	defer s.drop(ctx)
	r.progressf("   %s: inserting %s rows", label, count(float64(rows)))
	if err := s.preload(ctx, rows); err != nil {
		return res, err
	}
	cfg.ExpectedItems = rows
	f, err := startFakeWith(cfg)
	if err != nil {
		return res, err
	}
	defer f.close()
	r.progressf("   %s: a fresh daemon pushing for %s", label, run)
	d, err := r.startDaemon(ctx, s, f, false, flags...)
	if err != nil {
		return res, err
	}
	defer func() { _ = d.stop() }()
	if res.first, err = firstRequest(ctx, f, 30*time.Second); err != nil {
		return res, err
	}
	if restartAt > 0 {
		if err := sleepUntil(ctx, res.first.Add(restartAt)); err != nil {
			return res, err
		}
		r.progressf("   %s: restarting the daemon (SIGTERM, then a new one)", label)
		if err := d.stop(); err != nil {
			return res, err
		}
		if d, err = r.startDaemon(ctx, s, f, false, flags...); err != nil {
			return res, err
		}
		res.restarted = d.started
	}
	if err := sleepUntil(ctx, res.first.Add(run)); err != nil {
		return res, err
	}
	res.reqs = f.Requests()
	st, err := breakerstore.ReadState(ctx, s.pool)
	if err != nil {
		return res, err
	}
	res.rate = st.Rate
	return res, d.stop()
}

// firstRequest waits until the fake saw a request.
func firstRequest(ctx context.Context, f *fake, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		if at := f.Stats().FirstRequestAt; !at.IsZero() {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("bench: no request reached the fake within %s", limit)
		}
		if err := sleepUntil(ctx, time.Now().Add(10*time.Millisecond)); err != nil {
			return time.Time{}, err
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// acceptedRate is the accepted requests a second and the share of 429s
// among the total requests that arrived from from on, up to the last of
// them.
func acceptedRate(reqs []fakethirdparty.Request, from time.Time) (perSec, share float64, total int, err error) {
	var ok, limited int
	to := from
	for _, q := range reqs {
		if q.At.Before(from) {
			continue
		}
		total++
		to = q.At
		switch q.Status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
		}
	}
	secs := to.Sub(from).Seconds()
	if total == 0 || secs <= 0 {
		return 0, 0, total, errors.New("bench: no request in the measured span")
	}
	return float64(ok) / secs, float64(limited) / float64(total), total, nil
}

// measure is acceptedRate; at SizeTiny a span with no request (a slow
// machine's restart took it all) reads as zero rather than failing the row.
func (sz limitSizes) measure(reqs []fakethirdparty.Request, from time.Time) (perSec, share float64, err error) {
	perSec, share, _, err = acceptedRate(reqs, from)
	if err != nil && !sz.judge {
		return 0, 0, nil
	}
	return perSec, share, err
}

// perSpan says the accepted requests a second in each span of every from
// first on, for the notes: how the rate was learnt over time.
func perSpan(reqs []fakethirdparty.Request, first time.Time, every time.Duration) string {
	var counts []int
	for _, q := range reqs {
		if q.Status != http.StatusOK {
			continue
		}
		i := int(q.At.Sub(first) / every)
		for len(counts) <= i {
			counts = append(counts, 0)
		}
		counts[i]++
	}
	parts := make([]string, len(counts))
	for i, n := range counts {
		parts[i] = strconv.FormatFloat(float64(n)/every.Seconds(), 'f', 1, 64)
	}
	return strings.Join(parts, ", ")
}

// learntText says what the daemon stored of the rate.
func learntText(rt breakerstore.Rate) string {
	if rt.Limit <= 0 {
		return "nothing learnt"
	}
	return fmt.Sprintf("learnt %.1f/s, ceiling %.1f/s, %s", rt.Limit, rt.Ceiling, rt.Phase)
}

// limitRow builds a row of accepted requests a second against a limit.
func limitRow(sz limitSizes, name, measured, baseline string, perSec, share, want float64, values map[string]float64) Row {
	row := Row{
		Scenario: name,
		Measured: measured,
		Baseline: baseline,
		Figure:   fmt.Sprintf("%.1f/s, %.1f%%", perSec, 100*share),
		Target:   fmt.Sprintf(">= %.0f/s, <= 5%% 429", want),
		Pass:     perSec >= want && share <= most429,
		Values:   values,
	}
	if !sz.judge {
		row.Target, row.Pass = "(tiny: not judged)", true
	}
	return row
}

// coldStart: a fresh daemon, a backlog, batch 20; the fake allows 20
// requests/s with a burst of 2 and answers bare 429s beyond.
func (r *runner) coldStart(ctx context.Context) ([]Row, error) {
	sz := r.limitSizes()
	cfg := fakethirdparty.Config{UnannouncedLimit: coldLimit, UnannouncedBurst: coldBurst}
	res, err := r.runAgainstLimit(ctx, "cold-start", sz.coldRows, cfg, sz.run, 0, "--batch-size", strconv.Itoa(coldBatch))
	if err != nil {
		return nil, err
	}
	perSec, share, err := sz.measure(res.reqs, res.first.Add(sz.from))
	if err != nil {
		return nil, err
	}
	r.note("cold start: accepted requests/s in each 5 s from the first request: %s; %s", perSpan(res.reqs, res.first, 5*time.Second), learntText(res.rate))
	return []Row{limitRow(sz, "cold start",
		fmt.Sprintf("%.1f accepted requests/s, %.1f%% answered 429 (from %s on; %s rows, batch %d)", perSec, 100*share, sz.from, count(float64(sz.coldRows)), coldBatch),
		fmt.Sprintf("the fake allows %.0f requests/s, burst %d, unannounced", coldLimit, coldBurst),
		perSec, share, coldOK,
		map[string]float64{"accepted_per_s": perSec, "share_429": share, "learnt_per_s": res.rate.Limit, "ceiling_per_s": res.rate.Ceiling},
	)}, nil
}

// fastLimit: as the cold start, at 200 requests/s with a burst of 10 and 4
// requests in flight; a backlog the run cannot drain.
func (r *runner) fastLimit(ctx context.Context) ([]Row, error) {
	sz := r.limitSizes()
	rows := int(fastLimit*1.25*sz.run.Seconds()) * coldBatch
	cfg := fakethirdparty.Config{UnannouncedLimit: fastLimit, UnannouncedBurst: fastBurst}
	res, err := r.runAgainstLimit(ctx, "fast-limit", rows, cfg, sz.run, 0,
		"--batch-size", strconv.Itoa(coldBatch), "--max-in-flight", "4")
	if err != nil {
		return nil, err
	}
	perSec, share, err := sz.measure(res.reqs, res.first.Add(sz.from))
	if err != nil {
		return nil, err
	}
	r.note("fast limit: accepted requests/s in each 5 s from the first request: %s; %s", perSpan(res.reqs, res.first, 5*time.Second), learntText(res.rate))
	// The daemon's own pace at this batch size, with no limit, on this
	// machine now: what the row can reach at most.
	own := sz.run / 4
	base, err := r.runAgainstLimit(ctx, "fast-limit-none", int(2*fastLimit*own.Seconds())*coldBatch, fakethirdparty.Config{}, own, 0,
		"--batch-size", strconv.Itoa(coldBatch), "--max-in-flight", "4")
	if err != nil {
		return nil, err
	}
	basePerSec, _, err := sz.measure(base.reqs, base.first.Add(own/4))
	if err != nil {
		return nil, err
	}
	row := limitRow(sz, "fast limit",
		fmt.Sprintf("%.1f accepted requests/s, %.1f%% answered 429 (from %s on; batch %d, 4 in flight)", perSec, 100*share, sz.from, coldBatch),
		fmt.Sprintf("the fake allows %.0f requests/s, burst %d, unannounced; with no limit the daemon sent %.0f/s", fastLimit, fastBurst, basePerSec),
		perSec, share, fastShare*fastLimit,
		map[string]float64{"accepted_per_s": perSec, "share_429": share, "ratio": perSec / fastLimit, "learnt_per_s": res.rate.Limit,
			"ceiling_per_s": res.rate.Ceiling, "unlimited_per_s": basePerSec},
	)
	row.Figure = fmt.Sprintf("%.2fx, %.1f%%", perSec/fastLimit, 100*share)
	if sz.judge {
		row.Target = fmt.Sprintf(">= %.2fx, <= 5%% 429", fastShare)
	}
	return []Row{row}, nil
}

// restart: the cold start, with the daemon stopped at restartAt and a new
// one started; measured from settle after the new one started.
func (r *runner) restart(ctx context.Context) ([]Row, error) {
	sz := r.limitSizes()
	cfg := fakethirdparty.Config{UnannouncedLimit: coldLimit, UnannouncedBurst: coldBurst}
	res, err := r.runAgainstLimit(ctx, "restart", sz.coldRows, cfg, sz.run, sz.restartAt, "--batch-size", strconv.Itoa(coldBatch))
	if err != nil {
		return nil, err
	}
	perSec, share, err := sz.measure(res.reqs, res.restarted.Add(sz.settle))
	if err != nil {
		return nil, err
	}
	r.note("restart: accepted requests/s in each 5 s from the first request (restarted at %.1f s): %s; %s",
		res.restarted.Sub(res.first).Seconds(), perSpan(res.reqs, res.first, 5*time.Second), learntText(res.rate))
	return []Row{limitRow(sz, "restart",
		fmt.Sprintf("%.1f accepted requests/s, %.1f%% answered 429 (from %s after the restart at %s)", perSec, 100*share, sz.settle, sz.restartAt),
		fmt.Sprintf("the fake allows %.0f requests/s, burst %d, unannounced", coldLimit, coldBurst),
		perSec, share, coldOK,
		map[string]float64{"accepted_per_s": perSec, "share_429": share, "learnt_per_s": res.rate.Limit, "ceiling_per_s": res.rate.Ceiling},
	)}, nil
}

// handover: the third party down (503); the daemon's breaker opens; the
// daemon is killed (SIGKILL) handoverGap later, within its open period; a
// successor starts once the period is over, and the third party answers
// again half an open period after the successor's first request. The
// successor should send one probe before then, not a fresh count of
// failures.
func (r *runner) handover(ctx context.Context) ([]Row, error) {
	sz := r.limitSizes()
	const rows = 2_000
	s, err := r.newScratch(ctx, "handover", false)
	if err != nil {
		return nil, err
	}
	defer s.drop(ctx)
	if err := s.preload(ctx, rows); err != nil {
		return nil, err
	}
	f, err := startFakeWith(fakethirdparty.Config{FailureRate: 1, ExpectedItems: rows})
	if err != nil {
		return nil, err
	}
	defer f.close()
	flags := []string{"--breaker-open-timeout", sz.breakerOpen.String()}
	r.progressf("   handover: the third party down; the first daemon's breaker opens")
	d, err := r.startDaemon(ctx, s, f, false, flags...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.stop() }()
	expiry, err := waitBreakerOpen(ctx, s, 30*time.Second)
	if err != nil {
		return nil, err
	}
	opened := expiry.Add(-sz.breakerOpen)
	if err := sleepUntil(ctx, opened.Add(sz.handoverGap)); err != nil {
		return nil, err
	}
	r.progressf("   handover: killing the first daemon %s after its breaker opened", sz.handoverGap)
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	before := len(f.Requests())
	if err := sleepUntil(ctx, expiry.Add(time.Second)); err != nil {
		return nil, err
	}
	r.progressf("   handover: a successor starts, %s after the open period ended", time.Second)
	d2, err := r.startDaemon(ctx, s, f, false, flags...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d2.stop() }()
	// The successor's job may wait for River's scheduler a few seconds;
	// the third party stays down for half an open period after the
	// successor's first request, enough for a fresh count of failures.
	deadline := time.Now().Add(30 * time.Second)
	for len(f.Requests()) == before {
		if time.Now().After(deadline) {
			return nil, errors.New("bench: handover: the successor sent nothing within 30 s")
		}
		if err := sleepUntil(ctx, time.Now().Add(10*time.Millisecond)); err != nil {
			return nil, err
		}
	}
	firstAt := f.Requests()[before].At
	if err := sleepUntil(ctx, firstAt.Add(sz.breakerOpen/2)); err != nil {
		return nil, err
	}
	f.SetConfig(fakethirdparty.Config{ExpectedItems: rows})
	back := time.Now()
	reqs := f.Requests()
	sent := 0
	for _, q := range reqs[before:] {
		if q.At.Before(back) {
			sent++
		}
	}
	r.progressf("   handover: the third party answers again; the successor drains")
	end, err := s.waitDrained(ctx, f.Server, rows, drainLimit(rows)+2*sz.breakerOpen)
	if err != nil {
		return nil, err
	}
	if err := d2.stop(); err != nil {
		return nil, err
	}
	row := Row{
		Scenario: "handover",
		Measured: fmt.Sprintf("%d requests from the successor in the %s from its first to the third party's return; drained %.1f s after it", sent, back.Sub(firstAt).Round(100*time.Millisecond), end.Sub(back).Seconds()),
		Baseline: fmt.Sprintf("predecessor killed %s into its %s open period; successor started 1 s after it", sz.handoverGap, sz.breakerOpen),
		Figure:   strconv.Itoa(sent),
		Target:   "<= 1",
		Pass:     sent <= 1,
		Values:   map[string]float64{"successor_requests": float64(sent), "drained_after_s": end.Sub(back).Seconds()},
	}
	if !sz.judge {
		row.Target, row.Pass = "(tiny: not judged)", true
	}
	return []Row{row}, nil
}

// waitBreakerOpen waits until the stored breaker is open and returns when
// its open period ends.
func waitBreakerOpen(ctx context.Context, s *scratch, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		st, err := breakerstore.ReadState(ctx, s.pool)
		if err != nil {
			return time.Time{}, err
		}
		if st.Breaker.State == gobreaker.StateOpen && !st.Breaker.Expiry.IsZero() {
			return st.Breaker.Expiry, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("bench: the breaker did not open within %s", limit)
		}
		if err := sleepUntil(ctx, time.Now().Add(20*time.Millisecond)); err != nil {
			return time.Time{}, err
		}
	}
}
