package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Tests of issue 20's seams: a rule of one feed holds for every feed, and
// a destination owns its settings, state, metrics and log lines.

// scrape returns the daemon's /metrics text.
func (d *runningDaemon) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + d.addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(text)
}

// A source's row larger than SYNCER_MAX_ITEM_BYTES is recorded failed with
// the reason and never sent, as a row of resources is: the bound is the
// feeds', not one feed's.
func TestSourceItemLargerThanTheBoundIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE docs (id bigint PRIMARY KEY, body text)`)
	cfg := sourcesConfig(t, fmt.Sprintf("destinations:\n  one:\n    url: %s\nsources:\n  - {table: docs, key: id, destination: one}\n", dest.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		c.Exporter.MaxItemBytes = 1 << 20
	})

	b.exec(t, `INSERT INTO docs VALUES (1, 'small'), (2, repeat('x', 4 << 20)), (3, 'small too')`)
	waitFor(t, 60*time.Second, "the large key failed, the others sent", func() bool {
		st := b.sourceStats(t)["docs"]
		return st.PendingKeys == 0 && st.FailedKeys == 1
	})
	require.Equal(t, []string{"1", "3"}, keys(byID(dest.fake)), "the 4 MiB row never went out")
	dest.mu.Lock()
	for _, body := range dest.bodies {
		require.Less(t, len(body), 1<<20, "no request carried the large row")
	}
	dest.mu.Unlock()
	var reason string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT error FROM syncer_source_failures WHERE source = 'docs' AND key = '2'`).Scan(&reason))
	require.Contains(t, reason, "SYNCER_MAX_ITEM_BYTES (1048576)")
	require.Contains(t, reason, "larger than")
}

// A destination's own max_in_flight holds even above the global setting:
// with 200 ms answers, the third party sees 8 requests at once.
func TestDestinationMaxInFlightAboveTheGlobalSetting(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	wide := newDestination(t, fakethirdparty.Config{Latency: 200 * time.Millisecond})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  wide:
    url: %s
    max_in_flight: 8
sources:
  - {table: orders, key: id, destination: wide, batch_size: 10}
`, wide.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		c.Delivery.MaxInFlight = 4 // the global setting, as --max-in-flight's default
	})

	b.exec(t, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 400) g`)
	b.waitSourcesDrained(t, "orders")
	st := wide.fake.Stats()
	require.Equal(t, int64(8), st.MaxInFlight, "the destination's own requests in flight, not the global 4")
	require.Zero(t, st.OverlappingIDs)
	requireOnceInOrder(t, wide.fake)
}

// Two destinations, one down for good and one that refuses its token:
// each shows its own breaker and credentials in /metrics, under its
// destination label, whatever the default export's state is, and the log
// names the destination's own token variable.
func TestDestinationsOwnStateMetricsAndLogs(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	crm := newDestination(t, fakethirdparty.Config{Token: "right"})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	b.exec(t, `CREATE TABLE leads (id bigint PRIMARY KEY, name text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  down:
    url: %s
  crm:
    url: %s
    token_env: CRM_TOKEN
sources:
  - {table: orders, key: id, destination: down}
  - {table: leads, key: id, destination: crm}
`, down.URL, crm.url), map[string]string{"CRM_TOKEN": "wr0ng-crm-t0ken"})
	b.installSources(t, cfg)
	var logs dbtest.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	d := b.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.GaugeInterval = 100 * time.Millisecond
		c.Delivery.BreakerFailures = 2
		c.Delivery.BreakerOpenTimeout = 10 * time.Minute
		c.Delivery.BackoffInitial = 10 * time.Millisecond
		c.Delivery.BackoffMax = 20 * time.Millisecond
	})

	b.exec(t, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 3) g`)
	b.exec(t, `INSERT INTO leads SELECT g, 'ann' FROM generate_series(1, 3) g`)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{"a": 1}')`)
	waitFor(t, 30*time.Second, "resources exported to the default destination", func() bool {
		return b.scalar(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL`) == 0
	})
	var text string
	waitFor(t, 60*time.Second, "each destination's state on its own series", func() bool {
		text = d.scrape(t)
		return strings.Contains(text, `syncer_breaker_state{destination="down"} 2`) &&
			strings.Contains(text, `syncer_credentials_refused{destination="crm"} 1`)
	})
	// Several refreshes later, the default namespace has overwritten
	// nothing.
	time.Sleep(500 * time.Millisecond)
	text = d.scrape(t)
	for _, want := range []string{
		`syncer_breaker_state{destination="down"} 2`,
		`syncer_credentials_refused{destination="crm"} 1`,
		`syncer_credentials_refused{destination="down"} 0`,
		`syncer_breaker_state{destination="crm"} 0`,
		`syncer_breaker_state{destination="default"} 0`,
		`syncer_credentials_refused{destination="default"} 0`,
		`syncer_items_exported_total{destination="default"} 1`,
		`syncer_max_in_flight_current{destination="crm"}`,
	} {
		require.Contains(t, text, want)
	}
	require.Zero(t, crm.fake.Stats().ItemsAccepted, "nothing accepted with the wrong token")

	var refused string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "refused the credentials") {
			refused = line
			break
		}
	}
	require.NotEmpty(t, refused, "the refusal is logged")
	require.Contains(t, refused, "CRM_TOKEN")
	require.Contains(t, refused, "destination=crm")
	require.NotContains(t, refused, "SYNCER_THIRDPARTY_TOKEN")
	require.NotContains(t, logs.String(), "wr0ng-crm-t0ken", "the token is never logged")
}

// A source may name the destination default, the one SYNCER_THIRDPARTY_*
// configures for resources: one list of destinations. Its rows and
// resources' arrive at the same third party, each source's job taking its
// turn at the destination's lock.
func TestSourceToTheDefaultDestination(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, v int)`)
	cfg := sourcesConfig(t, "destinations:\n  unused:\n    url: http://127.0.0.1:9\nsources:\n  - {table: orders, key: id, destination: default}\n", nil)
	b.installSources(t, cfg)
	const rows, orders = 300, 200
	b.fill(t, rows)
	b.exec(t, `INSERT INTO orders SELECT 1000000 + g, g FROM generate_series(1, $1) g`, orders)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })
	b.waitDrained(t, time.Minute)
	b.waitSourcesDrained(t, "orders")
	latest := b.fake.Latest()
	require.Len(t, latest, rows+orders, "resources' rows and the source's, at the one third party")
	for id := int64(1000001); id <= 1000000+orders; id++ {
		require.Contains(t, latest, id)
	}
}
