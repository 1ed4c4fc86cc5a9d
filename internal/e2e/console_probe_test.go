package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// The console's Probe now waits for the probe's answer and says it, as
// `syncer probe` does: a refusal again (the status and the third party's
// reason), then, the token mended at the receiver, the destination taking
// requests again; and nothing to probe once nothing holds it.
func TestConsoleProbeWaitsForTheAnswer(t *testing.T) {
	t.Parallel()
	s := startConsole(t, fakethirdparty.Config{Token: "the-right-token"}, consoleToken, nil)
	s.exec(t, `INSERT INTO notes SELECT g, 'n' || g FROM generate_series(1, 5) g`)
	waitFor(t, 30*time.Second, "the refusal in status", func() bool {
		rep, err := status.Gather(context.Background(), s.pool, nil)
		require.NoError(t, err)
		return len(rep.Destinations) == 1 && rep.Destinations[0].Credentials.Refused
	})
	probe := func() (int, string) {
		req, err := http.NewRequest(http.MethodPost, s.base+"/console/destinations/crm/probe", strings.NewReader(""))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}

	code, body := probe()
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `^destination crm: probe answered with status 401 at \S+, still held: thirdparty: push refused with status 401`, body)
	require.Zero(t, s.dest.fake.Stats().DistinctPairs)

	s.dest.fake.SetConfig(fakethirdparty.Config{Token: "crm-token"})
	code, body = probe()
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `^destination crm: probe accepted at \S+: the destination takes requests again`, body)
	waitFor(t, 20*time.Second, "every row, once the probe was accepted", func() bool { return s.dest.fake.Stats().DistinctPairs >= 5 })

	code, body = probe()
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "destination crm: nothing to probe: neither its credentials nor its URL are refused\n", body)
}
