package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/console"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/status"
)

// tenantGauge reads syncer_tenants{destination="crm",source="contacts",
// state=state} from the daemon's /metrics (a scrape refreshes it).
func tenantGauge(t *testing.T, addr, state string) int {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^syncer_tenants\{destination="crm",source="contacts",state="` + state + `"\} (\d+)$`).FindSubmatch(body)
	require.NotNil(t, m, "syncer_tenants of state %s in /metrics", state)
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}

// tenantCounts are the tenants of source contacts by state, as status
// gives them.
func (b *bundle) tenantCounts(t *testing.T) map[string]int {
	t.Helper()
	for _, src := range b.report(t).Sources {
		if src.Name == "contacts" && src.Tenants != nil {
			return src.Tenants.Counts
		}
	}
	return nil
}

// Issue 54 points 4, 5 and 6 through a daemon: a tenant whose query fails
// (a division by zero) is `error` with its SQLSTATE and condition name,
// a tenant ".." is `invalid`, in status and /metrics, their rows waiting;
// 30 tenants exported, then their rows and connection rows deleted, are
// counted nowhere and their facts are deleted by the daemon's tidy (here
// within seconds, TenantForgetAfter 2 s; an hour at most by default),
// but for the one a person paused.
func TestTenantsErrorInvalidAndGoneThroughADaemon(t *testing.T) {
	t.Parallel()
	require.LessOrEqual(t, daemon.TenantForgetAfterDefault+daemon.TenantTidyEveryDefault, time.Hour, "deleted within the hour")
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-"}})
	b.exec(t, `CREATE TABLE crm_connections (account_id text PRIMARY KEY, token text NOT NULL, portal int NOT NULL);
		INSERT INTO crm_connections SELECT 'g' || g, 'tok-g' || g, 1 FROM generate_series(1, 30) g;
		INSERT INTO crm_connections VALUES ('zero', 'tok-zero', 0), ('..', 'tok-..', 1);
		CREATE TABLE contacts (id bigint PRIMARY KEY, account_id text NOT NULL)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s/t/{tenant}
    tenants:
      query: SELECT token FROM crm_connections WHERE account_id = $1 AND 1 / portal >= 0
      timeout: 2s
sources:
  - {table: contacts, key: id, tenant: account_id, destination: crm, snapshot: false, lanes: 2}
`, dest.url), nil)
	b.installSources(t, cfg)
	d := b.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		c.TenantTidyEvery = 200 * time.Millisecond
		c.TenantForgetAfter = 2 * time.Second
		c.Console = func(ctx context.Context, m *metrics.Metrics) (http.Handler, error) {
			return console.New(ctx, b.pool, m, &console.Config{Token: consoleToken, Formats: map[string]string{"crm": "syncer"}})
		}
	})
	// The console's tenants page: a state's count by its id.
	consoleCount := func(state string) string {
		code, body := get(t, http.DefaultClient, "http://"+d.addr+"/console/sources/contacts/tenants", http.Header{"Authorization": {"Bearer " + consoleToken}})
		require.Equal(t, http.StatusOK, code)
		m := regexp.MustCompile(`<td id="count-` + state + `"[^>]*>(\d+)</td>`).FindStringSubmatch(body)
		require.NotNil(t, m, "count of %s on the console's tenants page", state)
		return m[1]
	}
	b.exec(t, `INSERT INTO contacts SELECT g, 'g' || g FROM generate_series(1, 30) g;
		INSERT INTO contacts VALUES (101, 'zero'), (102, 'zero'), (103, '..')`)
	waitFor(t, time.Minute, "the connected tenants' rows, one error and one invalid tenant", func() bool {
		c := b.tenantCounts(t)
		return dest.fake.TenantStats().Total.ItemsAccepted == 30 && c["error"] == 1 && c["invalid"] == 1
	})
	report := b.report(t)
	var top []status.Tenant
	for _, src := range report.Sources {
		if src.Name == "contacts" {
			top = src.Tenants.Top
		}
	}
	byName := map[string]status.Tenant{}
	for _, tn := range top {
		byName[tn.Tenant] = tn
	}
	require.Equal(t, "error", byName["zero"].State)
	require.Contains(t, byName["zero"].Error, "SQLSTATE 22012 division_by_zero")
	require.EqualValues(t, 2, byName["zero"].Pending, "its rows wait")
	require.Equal(t, "invalid", byName[".."].State)
	require.EqualValues(t, 1, byName[".."].Pending, "its rows wait")
	require.Zero(t, dest.fake.TenantStats().Tenants["zero"].Requests)
	require.Zero(t, dest.fake.TenantStats().Tenants[".."].Requests)
	require.Equal(t, 1, tenantGauge(t, d.addr, "error"))
	require.Equal(t, 1, tenantGauge(t, d.addr, "invalid"))
	require.Equal(t, "1", consoleCount("error"))
	require.Equal(t, "1", consoleCount("invalid"))

	// Gone: rows deleted (their tombstones go), then connection rows.
	// g1 is paused by a person first: it stays.
	pause, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", "g1")})
	require.NoError(t, err)
	_, err = pause.SetHold(t.Context(), breakerstore.Hold{Paused: true, By: "test"})
	require.NoError(t, err)
	b.exec(t, `DELETE FROM contacts WHERE account_id LIKE 'g%' AND account_id <> 'g1'`)
	waitFor(t, time.Minute, "the gone tenants' tombstones", func() bool {
		return dest.fake.TenantStats().Total.ItemsAccepted == 30+29
	})
	b.exec(t, `DELETE FROM contacts WHERE account_id = 'g1'`)
	b.exec(t, `DELETE FROM crm_connections WHERE account_id LIKE 'g%'`)
	gone := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM syncer_state WHERE starts_with(key, $1) AND NOT starts_with(key, $2)`,
			breakerstore.TenantNamespace("crm", "g"), breakerstore.TenantNamespace("crm", "g1:")).Scan(&n))
		return n
	}
	t.Logf("keys of the gone tenants in syncer_state before the tidy: %d", gone())
	waitFor(t, time.Minute, "the gone tenants' facts deleted", func() bool { return gone() == 0 })
	c := b.tenantCounts(t)
	require.Zero(t, c["ok"], "%v", c)
	require.Zero(t, c["unconnected"], "%v", c)
	require.Equal(t, 1, c["paused"], "g1, paused by a person, with nothing pending: %v", c)
	require.Equal(t, 1, c["error"], "%v", c)
	require.Equal(t, 1, c["invalid"], "%v", c)
	require.Zero(t, tenantGauge(t, d.addr, "ok"))
	require.Equal(t, 1, tenantGauge(t, d.addr, "paused"))
	require.Equal(t, "0", consoleCount("ok"))
	require.Equal(t, "1", consoleCount("paused"))
	f, err := breakerstore.ReadTenant(t.Context(), b.pool, "crm", "g1")
	require.NoError(t, err)
	require.True(t, f.Hold.Paused, "a person's pause is kept")
}
