package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/verify"
)

// TestVerifyNowAndLastVerified: "Verify now" records a request the
// daemons pick up, the overview says so in its "last verified" column, and
// an unknown source is refused.
func TestVerifyNowAndLastVerified(t *testing.T) {
	t.Parallel()
	db := dbtest.NewMigrated(t)
	c, err := New(t.Context(), db.Pool, metrics.New(prometheus.NewRegistry()), &Config{Token: consoleToken})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	do := func(method, path string) (int, string) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}

	code, body := do(http.MethodGet, "/console")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "last verified")
	require.Contains(t, body, "Verify now")
	require.Contains(t, body, "never")

	code, body = do(http.MethodPost, "/console/sources/resources/verify")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "a verify was asked for")
	last, err := verify.LastRuns(context.WithoutCancel(t.Context()), db.Pool)
	require.NoError(t, err)
	require.True(t, last["resources"].Requested())

	code, body = do(http.MethodGet, "/console")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "asked for; a daemon starts it")

	code, _ = do(http.MethodPost, "/console/sources/nosuch/verify")
	require.Equal(t, http.StatusBadRequest, code)
}

func TestVerifiedText(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	text, drift := verifiedText(&verify.Last{State: verify.StateFinished, FinishedAt: &at, StartedAt: &at,
		Counts: &verify.Counts{KindCounts: verify.KindCounts{Checked: 10, OK: 7, Missing: 2, Zombie: 1}}})
	require.Equal(t, "2026-11-28 12:00:00: 10 checked, 2 missing, 0 stale, 1 zombie, 0 failed, 0 unknown", text)
	require.True(t, drift)
	text, drift = verifiedText(nil)
	require.Equal(t, "never", text)
	require.False(t, drift)
	text, _ = verifiedText(&verify.Last{State: verify.StateRunning, StartedAt: &at})
	require.True(t, strings.HasSuffix(text, "(a run is under way)"), text)
}

// TestSourcePageShowsEachTenantsVerify (issue 54 point 15, CONTRACT
// 11.1): a source's page lists its tenants' last verifies, those that
// drifted first.
func TestSourcePageShowsEachTenantsVerify(t *testing.T) {
	t.Parallel()
	db := dbtest.NewMigrated(t)
	ctx := t.Context()
	for tn, counts := range map[string]string{
		"acme":   `{"checked": 10, "ok": 9, "missing": 1}`,
		"globex": `{"checked": 10, "ok": 10}`,
	} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO syncer_verify_last (source, state, by_whom, started_at, finished_at, counts)
			VALUES ($1, 'finished', 'command', now(), now(), $2)`, tenant.RunKey("resources", tenant.Tenant(tn)), counts)
		require.NoError(t, err)
	}
	c, err := New(ctx, db.Pool, metrics.New(prometheus.NewRegistry()), &Config{Token: consoleToken})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/console/sources/resources", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	body := string(b)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, "Tenants' last verify")
	acme, globex := strings.Index(body, "<td>acme</td>"), strings.Index(body, "<td>globex</td>")
	require.Positive(t, acme, body)
	require.Greater(t, globex, acme, "the tenant that drifted first")
	require.Contains(t, body[acme:globex], "10 checked, 1 missing")
}
