package deploy

import (
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/metrics"
)

// prometheusSeries are written by Prometheus itself for every target it
// scrapes, not served by syncer: the alerts use `up` to see a daemon down.
var prometheusSeries = map[string]bool{"up": true}

// fqNameRe reads a metric's name out of Desc.String(), the only way
// client_golang offers to see it.
var fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)

// servedMetrics returns the names of the series syncer's /metrics serves:
// what metrics.New registers plus the Go and process collectors the daemon
// adds (internal/daemon's Run), with the _bucket, _sum and _count series of
// histograms and the _sum and _count of summaries.
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// As the daemon does: the push path's series exist per destination,
	// the default export's from the start.
	metrics.New(reg).Destination(metrics.DefaultDestination)

	descs := make(chan *prometheus.Desc, 1024)
	reg.Describe(descs)
	close(descs)
	served := map[string]bool{}
	for d := range descs {
		m := fqNameRe.FindStringSubmatch(d.String())
		require.NotNil(t, m, "no name in %s", d)
		served[m[1]] = true
	}
	require.Contains(t, served, "syncer_items_exported_total")

	// Describe does not say a metric's type; Gather does, for every metric
	// without labels (a vector shows only once it has a child).
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			served[f.GetName()+"_bucket"] = true
			fallthrough
		case dto.MetricType_SUMMARY:
			served[f.GetName()+"_sum"] = true
			served[f.GetName()+"_count"] = true
		}
	}
	return served
}

// acceptedMetrics is what an expression may name: served series and
// Prometheus' own.
func acceptedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	accepted := servedMetrics(t)
	for n := range prometheusSeries {
		accepted[n] = true
	}
	return accepted
}

func newPromQLParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// metricNames parses expr with Prometheus' PromQL parser and returns the
// metric names its selectors name. A selector without a fixed name (a regex
// on __name__) is an error: nothing could check what it selects.
func metricNames(t *testing.T, p parser.Parser, expr string) []string {
	t.Helper()
	e, err := p.ParseExpr(expr)
	require.NoError(t, err, "expression: %s", expr)
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		require.NotEmpty(t, name, "selector %s in %q names no single metric", vs, expr)
		names = append(names, name)
		return nil
	})
	require.NotEmpty(t, names, "expression %q names no metric", expr)
	return names
}

func requireServed(t *testing.T, accepted map[string]bool, where string, names []string) {
	t.Helper()
	for _, n := range names {
		require.True(t, accepted[n], "%s: metric %s is not served by syncer (nor pending this round)", where, n)
	}
}

func TestServedMetricsKnowHistogramSeries(t *testing.T) {
	t.Parallel()
	served := servedMetrics(t)
	for _, n := range []string{
		"syncer_push_duration_seconds_bucket", "syncer_push_duration_seconds_count",
		"go_gc_duration_seconds_sum", "process_resident_memory_bytes", "syncer_river_jobs",
	} {
		require.True(t, served[n], "%s not served", n)
	}
	require.False(t, served["syncer_lock_held_bucket"], "a gauge has no buckets")
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	const path = "prometheus/alerts.yml"
	p := newPromQLParser()
	groups, errs := rulefmt.ParseFile(path, false, model.LegacyValidation, p, slog.New(slog.DiscardHandler))
	require.Empty(t, errs, "%s does not pass Prometheus' rule-file checks", path)
	require.NotEmpty(t, groups.Groups)

	accepted := acceptedMetrics(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "%s: rule %q is not an alert", path, r.Expr)
			require.NotContains(t, alerts, r.Alert, "alert %s twice", r.Alert)
			alerts = append(alerts, r.Alert)
			require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], "alert %s: severity", r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "alert %s: summary", r.Alert)
			requireServed(t, accepted, "alert "+r.Alert, metricNames(t, p, r.Expr))
		}
	}

	// What docs/operations.md and issue 12 ask operators to be told about.
	for _, want := range []string{
		"SyncerSourceLag",          // lag: the oldest pending row's age, of every source (resources' too)
		"SyncerFailedRowsGrowing",  // failed rows growing
		"SyncerBreakerOpen",        // breaker open
		"SyncerCredentialsRefused", // credentials (or URL) refused
		"SyncerNoSuccessfulPush",   // nothing accepted while rows are pending
		"SyncerRateLimitedOften",   // many 429s
		"SyncerDown",               // a daemon down
		"SyncerAbsent",             // no daemon at all
		"SyncerLockNotHeld",        // no lock holder while rows are pending
		// Issue 23: the configured mode's sources and destinations.
		"SyncerSourceStopped",       // a source stopped by a schema change
		"SyncerSourceLag",           // a source's oldest pending change
		"SyncerDestinationStalled",  // a destination that accepts nothing
		"SyncerSourceFailedGrowing", // a destination rejecting a source's items
		// Issue 44: verify found the third party holding other than we do.
		"SyncerVerifyDrift",
		// Issue 43: tenants.
		"SyncerTenantsRefused",                // tenants whose accounts refuse their credentials
		"SyncerTenantsUnconnectedWithPending", // tenants with rows waiting and no connection row
	} {
		require.Contains(t, alerts, want)
	}
}

// grafanaDashboard is the part of a dashboard's JSON model the test reads.
type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID      int             `json:"id"`
	Type    string          `json:"type"`
	Title   string          `json:"title"`
	Panels  []grafanaPanel  `json:"panels"` // a collapsed row's
	Targets []grafanaTarget `json:"targets"`
}

type grafanaTarget struct {
	Expr  string `json:"expr"`
	RefID string `json:"refId"`
}

// grafanaVars are Grafana's built-in interval variables, replaced by a
// duration so that the expression is PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

var labelValuesRe = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)

func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("grafana/syncer.json")
	require.NoError(t, err)
	var d grafanaDashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	require.NotEmpty(t, d.UID)

	p := newPromQLParser()
	accepted := acceptedMetrics(t)
	used := map[string]bool{}
	ids := map[int]bool{}
	var walk func(panels []grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, pl := range panels {
			require.False(t, ids[pl.ID], "panel id %d twice", pl.ID)
			ids[pl.ID] = true
			walk(pl.Panels)
			if pl.Type == "row" {
				continue
			}
			require.NotEmpty(t, pl.Targets, "panel %q has no query", pl.Title)
			refs := map[string]bool{}
			for _, tg := range pl.Targets {
				require.False(t, refs[tg.RefID], "panel %q: refId %s twice", pl.Title, tg.RefID)
				refs[tg.RefID] = true
				names := metricNames(t, p, grafanaVars.Replace(tg.Expr))
				requireServed(t, accepted, "panel "+pl.Title, names)
				for _, n := range names {
					used[n] = true
				}
			}
		}
	}
	walk(d.Panels)

	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRe.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
		requireServed(t, accepted, "variable "+v.Name, m[1:])
	}

	// What issue 12 asks the dashboard to show.
	for _, want := range []string{
		"syncer_items_exported_total",       // exported rate
		"syncer_breaker_state",              // breaker
		"syncer_requests_in_flight",         // requests in flight
		"syncer_rate_limit_current",         // learned rate
		"syncer_thirdparty_responses_total", // responses by code
		"syncer_push_duration_seconds_bucket",
		// Issue 23: per source and per destination.
		"syncer_source_items_exported_total",
		"syncer_source_items_failed_total",
		"syncer_source_pending",
		"syncer_source_failed",
		"syncer_source_oldest_pending_age_seconds",
		"syncer_source_stopped",
		"syncer_source_lock_held",
	} {
		require.True(t, used[want], "the dashboard does not show %s", want)
	}
	require.True(t, slices.ContainsFunc(d.Panels, func(pl grafanaPanel) bool {
		return slices.ContainsFunc(pl.Targets, func(tg grafanaTarget) bool {
			return strings.Contains(tg.Expr, "histogram_quantile(0.99")
		})
	}), "no p99 of the push duration")
}

// TestDeprecatedNamesServedNotQueried: the names the release before served
// for resources alone are still served this release (dashboards and
// alerts of the release before keep working during an upgrade), and
// nothing in deploy/ queries them any more: the dashboards and the alerts
// read the sources' families, for every source alike.
func TestDeprecatedNamesServedNotQueried(t *testing.T) {
	t.Parallel()
	served := servedMetrics(t)
	require.NotEmpty(t, metrics.Deprecated)
	p := newPromQLParser()
	for old, now := range metrics.Deprecated {
		require.True(t, served[old], "deprecated %s is served for one release", old)
		requireServed(t, served, "the alias of "+old, metricNames(t, p, now))
	}

	var queried []string
	groups, errs := rulefmt.ParseFile("prometheus/alerts.yml", false, model.LegacyValidation, p, slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			queried = append(queried, metricNames(t, p, r.Expr)...)
		}
	}
	raw, err := os.ReadFile("grafana/syncer.json")
	require.NoError(t, err)
	var d grafanaDashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	var walk func(panels []grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, pl := range panels {
			walk(pl.Panels)
			for _, tg := range pl.Targets {
				queried = append(queried, metricNames(t, p, grafanaVars.Replace(tg.Expr))...)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if m := labelValuesRe.FindStringSubmatch(v.Definition); m != nil {
			queried = append(queried, m[1])
		}
	}
	require.NotEmpty(t, queried)
	for _, n := range queried {
		require.True(t, served[n] || prometheusSeries[n], "deploy/ queries %s, which syncer does not serve", n)
		require.NotContains(t, metrics.Deprecated, n, "deploy/ still queries the deprecated %s", n)
	}
}
