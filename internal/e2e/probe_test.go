package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// `syncer probe` waits for the probe's answer and prints it: a refusal
// again (exit 1, with the destination's status), then, the token mended,
// the destination taking requests again (exit 0), long before the 30 s
// probe interval would have.
func TestProbeWaitsForTheAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	api := newDestination(t, fakethirdparty.Config{Token: "the-right-token"})
	dir := t.TempDir()
	tokenPath := secretFile(t, dir, "token", "a-wrong-token")
	log := &dbtest.Buffer{}
	b.ordersSource(t, fmt.Sprintf("    url: %s\n    token_file: %s\n", api.url, tokenPath), log)
	b.insertOrders(t, 1, 10)
	waitFor(t, 30*time.Second, "the refusal in status", func() bool {
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		return len(rep.Destinations) == 1 && rep.Destinations[0].Credentials.Refused
	})
	probe := func() (int, string) {
		var out, errb bytes.Buffer
		code := cli.Main(context.Background(), []string{"probe", "--destination", "d", "--wait", "25s",
			"--database-url", b.dsn, "--log-level", "error"}, &out, &errb)
		return code, out.String() + errb.String()
	}

	code, out := probe()
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "destination d: probe asked; waiting up to 25s for a daemon's answer\n")
	require.Regexp(t, `destination d: probe answered with status 401 at \S+, still held: thirdparty: push refused with status 401`, out)
	require.Zero(t, api.fake.Stats().DistinctPairs)

	tmp := secretFile(t, dir, "token.new", "the-right-token")
	require.NoError(t, os.Rename(tmp, tokenPath))
	code, out = probe()
	require.Equal(t, 0, code, out)
	t.Log(out)
	require.Regexp(t, `destination d: (probe accepted at \S+: the destination takes requests again|nothing to probe)`, out)
	waitFor(t, 20*time.Second, "every row, once the probe was accepted", func() bool { return api.fake.Stats().DistinctPairs >= 10 })
}
