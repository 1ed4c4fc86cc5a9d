package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/sources"
)

// runLogged starts `syncer run` with cfgPath, its HTTP server on addr and
// its log in JSON at info level; it is killed when the test ends.
func (w *tenantWorld) runLogged(t *testing.T, cfgPath, addr string) *dbtest.Buffer {
	t.Helper()
	cmd := exec.Command(w.bin, "run", "--database-url", w.dsn, "--config", cfgPath,
		"--thirdparty-url", w.fakeURL, "--http-addr", addr, "--log-level", "info", "--log-format", "json")
	errOut := &dbtest.Buffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, errOut
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return errOut
}

// metricValue is the value of the series whose name and labels are
// exactly series ("syncer_rate_limited_total{destination=\"crm\"}") in
// the daemon's /metrics at addr; -1 when it is not there.
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, addr), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return -1
}

// Issue 54 point 8, contract 10.1 "Counted": the requests, 429s and
// latencies of a tenant's deliverer count in its destination's series, as
// any request does, and no series has a tenant label. On a77f328 the
// tenants' deliverers were given no metrics at all: after every one of
// acme's 429s, syncer_rate_limited_total{destination="crm"} stayed 0.
func TestTenantTrafficCountsInTheDestinationsMetrics(t *testing.T) {
	t.Parallel()
	// Each tenant's account takes 2 requests a second and answers the
	// rest with a bare 429.
	w := newTenantWorld(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{RateLimit: 2, Burst: 1}})
	w.exec(t, `INSERT INTO crm_connections VALUES ('acme', 'tok-acme'), ('globex', 'tok-globex')`)
	cfg := w.config(t, w.fakeURL, 2)
	addr := freePort(t)
	runErr := w.runLogged(t, cfg, addr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", runErr.String())
		}
	})
	// 30 rows a tenant, in 3 writes of 10 a while apart: batches of 10
	// (the configuration's batch_size) as fast as the lanes go.
	for i := range 3 {
		w.exec(t, `INSERT INTO contacts (id, account) SELECT g, CASE WHEN g % 2 = 0 THEN 'acme' ELSE 'globex' END
			FROM generate_series($1::int * 20 + 1, $1::int * 20 + 20) g`, i)
		time.Sleep(300 * time.Millisecond)
	}
	waitFor(t, 2*time.Minute, "both tenants' rows at their accounts", func() bool {
		return w.holds("acme", 30, nil) && w.holds("globex", 30, nil)
	})
	w.waitSourcesDrained(t, "contacts")

	var limited, ok int64
	for _, tn := range []string{"acme", "globex"} {
		st := w.fake.TenantStats().Tenants[tn]
		limited += st.RequestsByStatus["429"]
		ok += st.RequestsByStatus["200"]
	}
	require.Positive(t, limited, "the accounts answered 429s")
	t.Logf("the accounts answered %d requests 200 and %d 429", ok, limited)

	waitFor(t, 10*time.Second, "the 429s counted", func() bool {
		return metricValue(t, addr, `syncer_rate_limited_total{destination="crm"}`) == float64(limited)
	})
	require.Equal(t, float64(limited), metricValue(t, addr, `syncer_thirdparty_responses_total{code="429",destination="crm"}`))
	require.Equal(t, float64(ok), metricValue(t, addr, `syncer_thirdparty_responses_total{code="2xx",destination="crm"}`))
	require.Positive(t, metricValue(t, addr, `syncer_thirdparty_last_success_timestamp_seconds{destination="crm"}`))
	require.Zero(t, metricValue(t, addr, `syncer_requests_in_flight{destination="crm"}`), "every request started ended")
	text := metricsText(t, addr)
	require.NotContains(t, text, "acme", "no series names a tenant")
	require.NotContains(t, text, "globex", "no series names a tenant")
}

// Issue 54 point 12: each lane's `exporter: source run` line names the
// Idempotency-Key of the last batch that lane pushed, a batch of that
// lane's own tenant. On a77f328 the key was the exporter's last, whatever
// lane pushed it: three lanes' lines named one tenant's key.
func TestSourceRunLinesNameTheirOwnLanesKey(t *testing.T) {
	t.Parallel()
	w := newTenantWorld(t, fakethirdparty.Config{Latency: 20 * time.Millisecond})
	tenants := []string{"acme", "initech", "globex"}
	const lanes = 8
	laneOf := map[int]string{}
	for _, tn := range tenants {
		w.exec(t, `INSERT INTO crm_connections VALUES ($1, 'tok-' || $1)`, tn)
		laneOf[sources.Lane(tn, lanes)] = tn
	}
	require.Len(t, laneOf, len(tenants), "the tenants' lanes differ")
	cfg := w.config(t, w.fakeURL, lanes)
	runErr := w.runLogged(t, cfg, freePort(t))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", runErr.String())
		}
	})
	// Each tenant's rows in writes of its own, several rounds, so that
	// the three lanes push at once, each lane several batches.
	for round := range 5 {
		for i, tn := range tenants {
			w.exec(t, `INSERT INTO contacts (id, account) SELECT $1::int * 100 + $2::int * 10 + g, $3 FROM generate_series(1, 10) g`, round, i, tn)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tn := range tenants {
		waitFor(t, time.Minute, tn+"'s rows at its account", func() bool { return w.holds(tn, 50, nil) })
	}
	keysOf := map[string]map[string]bool{}
	for _, tn := range tenants {
		keysOf[tn] = map[string]bool{}
		for _, d := range w.fake.TenantDeliveries(tn) {
			keysOf[tn][d.Key] = true
		}
	}
	// The lines come as the lanes' runs end (a cold linger after the
	// last batch).
	type runLine struct {
		Msg    string `json:"msg"`
		Source string `json:"source"`
		Key    string `json:"last_idempotency_key"`
	}
	var lines map[string][]runLine
	waitFor(t, time.Minute, "a source run line of each tenant's lane", func() bool {
		lines = map[string][]runLine{}
		sc := bufio.NewScanner(strings.NewReader(runErr.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l runLine
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "exporter: source run" {
				continue
			}
			_, lane, ok := jobs.LaneOf(l.Source)
			if tn := laneOf[lane]; ok && tn != "" {
				lines[tn] = append(lines[tn], l)
			}
		}
		return len(lines) == len(tenants)
	})
	for tn, ls := range lines {
		for _, l := range ls {
			require.NotEmpty(t, l.Key, "line of %s", l.Source)
			require.True(t, keysOf[tn][l.Key], "the line of lane %s (tenant %s) names key %s, not one of %s's requests", l.Source, tn, l.Key, tn)
		}
		t.Logf("tenant %s: %d run lines, last key %s", tn, len(ls), ls[len(ls)-1].Key)
	}
}
