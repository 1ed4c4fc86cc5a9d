package bench

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCompareRunsNamesFallsEachWay: a figure where higher is better falls
// when it shrinks by more than 10%, one where lower is better when it
// grows by more; medians are over the rounds a side measured, and a row
// the base cannot run (a feature it lacks) is shown, not counted as a fall.
func TestCompareRunsNamesFallsEachWay(t *testing.T) {
	t.Parallel()
	drain := func(rate, rss, cpu float64) Row {
		return Row{Scenario: "drain", Values: map[string]float64{"rows": 1000, "rows_per_s": rate, "peak_rss_bytes": rss, "daemon_cpu_s": cpu}}
	}
	latency := func(p50, p99 float64) Row {
		return Row{Scenario: "latency", Values: map[string]float64{"p50_ms": p50, "p99_ms": p99}}
	}
	base := [][]Row{
		{drain(100, 30<<20, 0.02), latency(5, 20), {Scenario: "tenants: column cost", Error: "unknown flag --tenant"}},
		{drain(120, 30<<20, 0.02), latency(5, 20), {Scenario: "tenants: column cost", Error: "unknown flag --tenant"}},
		{drain(110, 30<<20, 0.02), latency(5, 20), {Scenario: "tenants: column cost", Error: "unknown flag --tenant"}},
	}
	head := [][]Row{
		{drain(80, 30<<20, 0.03), latency(5.2, 30), {Scenario: "tenants: column cost", Values: map[string]float64{"ratio": 0.95}}},
		{drain(200, 35<<20, 0.03), latency(4, 23), {Scenario: "tenants: column cost", Values: map[string]float64{"ratio": 0.97}}},
		{{Scenario: "drain", Error: "not drained"}, latency(5, 22), {Scenario: "tenants: column cost", Values: map[string]float64{"ratio": 0.9}}},
	}
	figures := compareRuns(base, head)
	got := map[string]Figure{}
	for _, f := range figures {
		got[f.Row+" "+f.Name] = f
	}

	rate := got["drain rows/s"]
	require.Equal(t, 110.0, rate.BaseMedian)
	require.Equal(t, 140.0, rate.HeadMedian, "the median of the two rounds that drained")
	require.True(t, math.IsNaN(rate.Head[2]))
	require.False(t, rate.Worse)
	require.Contains(t, rate.Error, "head: not drained")

	cpu := got["drain daemon CPU µs/row"]
	require.InDelta(t, 30.0, cpu.HeadMedian, 1e-9)
	require.True(t, cpu.Worse, "1.5x the CPU a row: lower is better")

	rss := got["drain peak RSS"]
	require.InDelta(t, 32.5*(1<<20), rss.HeadMedian, 1)
	require.False(t, rss.Worse, "8% more is within 10%")

	require.False(t, got["latency p50 ms"].Worse)
	require.True(t, got["latency p99 ms"].Worse, "p99 23 ms against 20 ms: lower is better")

	tenants := got["tenants: column cost ratio"]
	require.False(t, tenants.Worse, "a base without the feature has no figure to fall from")
	require.Contains(t, tenants.Error, "base: unknown flag --tenant")

	cmp := &Comparison{Base: Side{Name: "3cfe467"}, Head: Side{Name: "head"}, Rounds: 3, Figures: figures}
	var out bytes.Buffer
	require.NoError(t, cmp.WriteTable(&out))
	require.Contains(t, out.String(), "drain, daemon CPU µs/row: 30.0 against 20.0 (1.50x)")
	var js bytes.Buffer
	require.NoError(t, cmp.WriteJSON(&js), "NaN of a failed round is written as null")
	require.Contains(t, js.String(), "null")
}

// TestCompareRunsShowsEveryRowItRan: each tenant's own limit is compared
// on its slowest and median tenant (the row printed nothing before), and
// a row whose figures no spec names is said, not left out.
func TestCompareRunsShowsEveryRowItRan(t *testing.T) {
	t.Parallel()
	own := func(worst, median float64) Row {
		return Row{Scenario: ownQueryRow, Values: map[string]float64{"worst_ratio": worst, "median_ratio": median, "below": 0}}
	}
	odd := Row{Scenario: "odd row", Values: map[string]float64{"seconds": 3}}
	base := [][]Row{{own(0.91, 0.97), odd}, {own(0.92, 0.98), odd}, {own(0.91, 0.98), odd}}
	head := [][]Row{{own(0.95, 0.98), odd}, {own(0.95, 1.0), odd}, {own(0.98, 0.99), odd}}
	got := map[string]Figure{}
	for _, f := range compareRuns(base, head) {
		got[f.Row+" "+f.Name] = f
	}
	worst := got[ownQueryRow+" slowest tenant x own limit"]
	require.InDelta(t, 0.95, worst.HeadMedian, 1e-9)
	require.InDelta(t, 0.91, worst.BaseMedian, 1e-9)
	require.False(t, worst.Worse)
	require.Contains(t, got, ownQueryRow+" median tenant x own limit")
	require.Contains(t, got["odd row -"].Error, "no figure of this row is compared")
}
