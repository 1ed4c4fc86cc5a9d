package bench

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// tenantJoin: a daemon starts while another drains a tenant source's
// backlog alone, every lane its own. The row measures how long after the
// second daemon says it runs (syncer_daemons) it sends its share: the
// first second from which each 1 s window has it send at least 30% of
// the requests. Before the share (exporter/share.go), the first daemon
// kept its lanes until their run limit (30 s) and a drain shorter than
// that stayed with it whole.
func (r *runner) tenantJoin(ctx context.Context) (Row, error) {
	sz := r.tenantSizes()
	const label = "tenants-join"
	two, err := r.twoDaemonSetup(ctx, label)
	if err != nil {
		return Row{}, err
	}
	defer two.close(ctx)
	rows := sz.sustainRows
	r.progressf("   %s: one daemon drains %d tenants × %d rows (rate_limit: 5 each account); a second starts during it", label, sz.limitTenants, rows)
	a, err := r.startDaemon(ctx, two.s, two.f, false, "--config", two.paths[0], "--thirdparty-url=")
	if err != nil {
		return Row{}, err
	}
	defer a.stop()
	if err := two.s.waitDaemons(ctx, "crm", 1, 30*time.Second); err != nil {
		return Row{}, err
	}
	if err := two.s.preloadTenants(ctx, "t", sz.limitTenants, rows); err != nil {
		return Row{}, err
	}
	alone := joinAlone
	if r.cfg.Size == SizeTiny && r.cfg.TenantScale <= 0 {
		alone = time.Second // the tiny run's drain lasts a few seconds
	}
	select {
	case <-ctx.Done():
		return Row{}, ctx.Err()
	case <-time.After(alone):
	}
	b, err := r.startDaemon(ctx, two.s, two.f, false, "--config", two.paths[1], "--thirdparty-url=")
	if err != nil {
		return Row{}, err
	}
	defer b.stop()
	if err := two.s.waitDaemons(ctx, "crm", 2, 30*time.Second); err != nil {
		return Row{}, err
	}
	joined := time.Now()
	r.progressf("   %s: the second daemon runs, %s after the backlog", label, alone)
	total := sz.limitTenants * rows
	if err := two.s.waitChanges(ctx, drainLimit(total)+time.Minute, a); err != nil {
		return Row{}, err
	}
	if got := two.f.TenantStats().Total.DistinctPairs; got < int64(total) {
		return Row{}, fmt.Errorf("bench: %s: the accounts hold %d rows of %d", label, got, total)
	}
	for _, d := range []*daemon{a, b} {
		if err := d.stop(); err != nil {
			return Row{}, err
		}
	}
	j := joinShares(two.tap.requests(), joined)
	r.progressf("   %s: the second daemon's share by second after it ran: %s", label, j.bySecond)
	figure, pass := "never", false
	if j.took >= 0 {
		figure, pass = fmt.Sprintf("%.0fs", j.took.Seconds()), j.took <= joinTarget
	}
	return Row{
		Scenario: "tenants: a daemon joins",
		Measured: fmt.Sprintf("the second daemon sent ≥ 30%% of the requests, 3 seconds in a row, from %s after it said it runs; %.0f%% of the requests from then to the drain's end (%d tenants × %d rows, rate_limit: 5, the first daemon alone for %s)",
			figure, 100*j.after, sz.limitTenants, rows, alone),
		Baseline: "the lanes' run limit, 30s, when a daemon gave lanes up only there",
		Figure:   figure,
		Target:   fmt.Sprintf("<= %s", joinTarget),
		Pass:     pass,
		Values:   map[string]float64{"took_s": j.took.Seconds(), "share_after": j.after},
	}, nil
}

const (
	// joinAlone is how long the first daemon drains alone.
	joinAlone = 5 * time.Second
	// joinTarget is the join row's bound: a third of the lanes' run
	// limit.
	joinTarget = 10 * time.Second
)

// joined is what joinShares finds.
type joined struct {
	// took is from the join to the first second from which the second
	// daemon (door 1) sent at least 30% of the requests of that second
	// and the next two; -1 if it never did.
	took time.Duration
	// after is its share of the requests from then on.
	after    float64
	bySecond string
}

// joinShares reads the tap's requests after the second daemon joined.
func joinShares(reqs []tappedRequest, at time.Time) joined {
	sort.Slice(reqs, func(i, k int) bool { return reqs[i].at.Before(reqs[k].at) })
	type window struct{ all, second int }
	var ws []window
	for _, q := range reqs {
		if q.at.Before(at) {
			continue
		}
		i := int(q.at.Sub(at) / time.Second)
		for len(ws) <= i {
			ws = append(ws, window{})
		}
		ws[i].all++
		if q.door == 1 {
			ws[i].second++
		}
	}
	out := joined{took: -1}
	from := -1
	share := func(w window) float64 { return float64(w.second) / float64(max(w.all, 1)) }
	for i := range ws {
		// From a second on: it and the next two (as many as the drain
		// has), so that the drain's tail, a few tenants left on one
		// daemon or the other, does not decide.
		ok := true
		for k := i; k < min(i+3, len(ws)); k++ {
			ok = ok && share(ws[k]) >= 0.3
		}
		if ok {
			from = i
			break
		}
	}
	var parts []string
	for i, w := range ws {
		if w.all > 0 {
			parts = append(parts, fmt.Sprintf("%d:%.0f%%", i, 100*float64(w.second)/float64(w.all)))
		}
	}
	out.bySecond = fmt.Sprint(parts)
	if from < 0 {
		return out
	}
	out.took = time.Duration(from) * time.Second
	all, second := 0, 0
	for _, w := range ws[from:] {
		all, second = all+w.all, second+w.second
	}
	if all > 0 {
		out.after = float64(second) / float64(all)
	}
	return out
}
