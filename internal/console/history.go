package console

import (
	"context"
	"fmt"
	"html/template"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/syncer-dev/syncer/internal/metrics"
)

// sample is a destination's counters at one time, as the daemon's metrics
// hold them.
type sample struct {
	at                        time.Time
	accepted, limited, failed float64
}

// history keeps the last span of samples of every destination, in memory:
// reading a few counters every step costs nothing next to a request, and
// the chart needs no table of its own. It is this process's view: a
// standby daemon, which sends nothing, draws a flat line.
type history struct {
	m           *metrics.Metrics
	every, span time.Duration

	mu     sync.Mutex
	byDest map[string][]sample
}

func newHistory(m *metrics.Metrics, every, span time.Duration) *history {
	return &history{m: m, every: every, span: span, byDest: map[string][]sample{}}
}

func (h *history) run(ctx context.Context) {
	if h.m == nil {
		return
	}
	t := time.NewTicker(h.every)
	defer t.Stop()
	h.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.sample(now)
		}
	}
}

// collect sums a vector's series by destination, of the series keep takes.
func collect(vec prometheus.Collector, keep func(labels map[string]string) bool) map[string]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		vec.Collect(ch)
		close(ch)
	}()
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.Counter == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range pb.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if keep == nil || keep(labels) {
			out[labels["destination"]] += pb.Counter.GetValue()
		}
	}
	return out
}

func (h *history) sample(now time.Time) {
	accepted := collect(h.m.ItemsExported, nil)
	limited := collect(h.m.RateLimited, nil)
	failed := collect(h.m.ThirdpartyResponses, func(l map[string]string) bool {
		code := l["code"]
		return !strings.HasPrefix(code, "2") && code != "429"
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := int(h.span/h.every) + 1
	for dest, a := range accepted {
		s := append(h.byDest[dest], sample{at: now, accepted: a, limited: limited[dest], failed: failed[dest]})
		if len(s) > keep {
			s = append(s[:0], s[len(s)-keep:]...)
		}
		h.byDest[dest] = s
	}
}

// point is a step's rates, a second.
type point struct {
	at                        time.Time
	accepted, limited, failed float64
}

func (h *history) points(dest string) []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.byDest[dest]
	var out []point
	for i := 1; i < len(s); i++ {
		dt := s[i].at.Sub(s[i-1].at).Seconds()
		if dt <= 0 {
			continue
		}
		out = append(out, point{at: s[i].at, accepted: max(0, s[i].accepted-s[i-1].accepted) / dt,
			limited: max(0, s[i].limited-s[i-1].limited) / dt, failed: max(0, s[i].failed-s[i-1].failed) / dt})
	}
	return out
}

// acceptedRate is the destination's accepted items a second over the last
// step; -1 before two samples.
func (h *history) acceptedRate(dest string) float64 {
	p := h.points(dest)
	if len(p) == 0 {
		return -1
	}
	return p[len(p)-1].accepted
}

// chart draws the last span of a destination as an inline SVG: accepted
// items a second on its own scale, 429s and errors a second on a second
// one. Only numbers go into it.
func (h *history) chart(dest string, now time.Time) template.HTML {
	const w, ht, pad = 720.0, 180.0, 30.0
	pts := h.points(dest)
	var top, topErr float64
	for _, p := range pts {
		top, topErr = max(top, p.accepted), max(topErr, p.limited, p.failed)
	}
	top, topErr = max(top, 1), max(topErr, 1)
	x := func(t time.Time) float64 {
		return pad + (w-2*pad)*(1-float64(now.Sub(t))/float64(h.span))
	}
	line := func(v func(point) float64, scale float64) string {
		var b strings.Builder
		for _, p := range pts {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(p.at), ht-pad-(ht-2*pad)*v(p)/scale)
		}
		return b.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="last hour">`, w, ht, w, ht)
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" class="frame"/>`, pad, pad, w-2*pad, ht-2*pad)
	fmt.Fprintf(&b, `<text x="%.0f" y="20" class="acc">accepted items/s (max %.1f)</text>`, pad, top)
	fmt.Fprintf(&b, `<text x="%.0f" y="20" class="lim">429s/s and errors/s (max %.2f)</text>`, w/2, topErr)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">-60 min</text><text x="%.0f" y="%.0f">now</text>`, pad, ht-8, w-pad-24, ht-8)
	fmt.Fprintf(&b, `<polyline class="acc" points="%s"/>`, line(func(p point) float64 { return p.accepted }, top))
	fmt.Fprintf(&b, `<polyline class="lim" points="%s"/>`, line(func(p point) float64 { return p.limited }, topErr))
	fmt.Fprintf(&b, `<polyline class="err" points="%s"/>`, line(func(p point) float64 { return p.failed }, topErr))
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers only
}
