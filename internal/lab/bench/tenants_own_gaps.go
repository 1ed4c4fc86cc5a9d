package bench

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/sources"
)

// ownTimeline is one tenant's accepted requests in an own-limits run,
// what says where its missing requests went: a tenant short of its limit
// either sends each request a little late (the excess spread over every
// gap) or stops now and then (a few gaps of several intervals).
type ownTimeline struct {
	name        string
	limit       float64
	lane        int
	ok          []time.Time // sorted
	inWindow    int
	ratio       float64
	first, last time.Time
}

// gapsText says, for the window [from, to), how much time a tenant's gaps
// took beyond its interval: in all, in gaps of up to 2 intervals (a
// request late), and in longer ones (a stop), with the three longest and
// when they began after start.
func (t ownTimeline) gapsText(start, from, to time.Time) string {
	interval := time.Duration(float64(time.Second) / t.limit)
	var late, stops time.Duration
	nLate, nStops := 0, 0
	type gap struct {
		at time.Time
		d  time.Duration
	}
	var gaps []gap
	for i := 1; i < len(t.ok); i++ {
		a, b := t.ok[i-1], t.ok[i]
		if a.Before(from) || !b.Before(to) {
			continue
		}
		d := b.Sub(a)
		gaps = append(gaps, gap{a, d})
		if excess := d - interval; excess > 0 {
			if d <= 2*interval {
				late += excess
				nLate++
			} else {
				stops += excess
				nStops++
			}
		}
	}
	slices.SortFunc(gaps, func(x, y gap) int { return cmp.Compare(y.d, x.d) })
	var top []string
	for _, g := range gaps[:min(3, len(gaps))] {
		top = append(top, fmt.Sprintf("%.0fms at %.2fs", float64(g.d.Milliseconds()), g.at.Sub(start).Seconds()))
	}
	return fmt.Sprintf("%s (%g/s, lane %d) %.2fx: first %.2fs, last %.2fs; %d in the window of %.1f due; beyond its interval: %d late by %.0fms in all, %d stops of %.0fms in all; longest %s",
		t.name, t.limit, t.lane, t.ratio, t.first.Sub(start).Seconds(), t.last.Sub(start).Seconds(), t.inWindow,
		t.limit*to.Sub(from).Seconds(), nLate, float64(late.Milliseconds()), nStops, float64(stops.Milliseconds()), strings.Join(top, ", "))
}

// ownTimelinesText is the slowest tenants' timelines, and each lane's
// asked rate and slowest tenant, for an own-limits run's progress.
func ownTimelinesText(tl []ownTimeline, lanes int, start, from, to time.Time, worst int) []string {
	slices.SortFunc(tl, func(a, b ownTimeline) int { return cmp.Compare(a.ratio, b.ratio) })
	var out []string
	for _, t := range tl[:min(worst, len(tl))] {
		out = append(out, t.gapsText(start, from, to))
	}
	type lane struct {
		tenants int
		asked   float64
		minimum float64
	}
	ls := make([]lane, lanes)
	for i := range ls {
		ls[i].minimum = 1e9
	}
	for _, t := range tl {
		l := &ls[t.lane]
		l.tenants++
		l.asked += t.limit
		l.minimum = min(l.minimum, t.ratio)
	}
	var parts []string
	for i, l := range ls {
		if l.tenants > 0 {
			parts = append(parts, fmt.Sprintf("%d: %d at %.0f/s min %.2fx", i, l.tenants, l.asked, l.minimum))
		}
	}
	out = append(out, "lanes (tenants, asked, slowest): "+strings.Join(parts, "; "))
	if len(tl) > 0 {
		out = append(out, laneSilences(tl, tl[0].lane, start, from, to))
	}
	return out
}

// laneSilenceMin is the least silence of a lane counted: a lane asking
// 50 requests/s or more has one every 20 ms.
const laneSilenceMin = 100 * time.Millisecond

// laneSilences says when lane sent nothing at all for laneSilenceMin or
// more within the window: a stop of the whole lane (its pass's end, a
// wait of its one loop), not of one tenant.
func laneSilences(tl []ownTimeline, lane int, start, from, to time.Time) string {
	var all []time.Time
	for _, t := range tl {
		if t.lane == lane {
			all = append(all, t.ok...)
		}
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	var parts []string
	var total time.Duration
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.Before(from) || !b.Before(to) {
			continue
		}
		if d := b.Sub(a); d >= laneSilenceMin {
			total += d
			parts = append(parts, fmt.Sprintf("%.0fms at %.2fs", float64(d.Milliseconds()), a.Sub(start).Seconds()))
		}
	}
	return fmt.Sprintf("lane %d silent (nothing sent for %s or more) %d times, %.0fms in all: %s",
		lane, laneSilenceMin, len(parts), float64(total.Milliseconds()), strings.Join(parts, ", "))
}

// laneOf is the tenant's lane, as the capture computes it.
func laneOf(tenant string, lanes int) int { return sources.Lane(tenant, lanes) }
