package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// syncer pause holds a destination for every daemon: rows written while
// it holds stay pending and nothing reaches the fake; status says paused,
// by the command line and since when; a daemon started meanwhile holds it
// too; syncer resume lets them through. An unknown destination exits 2.
func TestPauseAndResumeDestination(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	cfg := b.installNotesToCRM(t, dest.url)
	d := b.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		c.GaugeInterval = 100 * time.Millisecond
	})
	b.exec(t, `INSERT INTO notes VALUES (1, 'before')`)
	b.waitSourcesDrained(t, "notes")

	require.Contains(t, b.syncer(t, "pause", "--destination", "crm"), "destination crm paused")
	rep := b.report(t)
	require.Len(t, rep.Destinations, 1)
	require.NotNil(t, rep.Destinations[0].Paused)
	require.Equal(t, "command line", rep.Destinations[0].Paused.By)
	require.Contains(t, rep.Sources[0].Stopped, "paused by command line")
	require.Contains(t, b.syncer(t, "status"), "PAUSED by command line since")
	// The metrics say what status says.
	waitFor(t, 10*time.Second, "the metrics say paused and stopped", func() bool {
		m := metricsText(t, d.addr)
		return strings.Contains(m, `syncer_destination_paused{destination="crm"} 1`) &&
			strings.Contains(m, `syncer_source_stopped{destination="crm",source="notes"} 1`)
	})
	// A second daemon, started while paused, holds it as well.
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })
	time.Sleep(2 * time.Second) // the daemons read the shared facts every second
	accepted := len(dest.fake.Deliveries())
	b.exec(t, `INSERT INTO notes SELECT g, 'while paused' FROM generate_series(2, 21) g`)
	time.Sleep(4 * time.Second)
	require.Len(t, dest.fake.Deliveries(), accepted, "nothing sent while paused")
	require.EqualValues(t, 20, b.sourceStats(t)["notes"].PendingKeys, "every row kept pending")

	require.Contains(t, b.syncer(t, "resume", "--destination", "crm"), "destination crm resumed")
	b.waitSourcesDrained(t, "notes")
	require.Len(t, byID(dest.fake), 21)
	requireOnceInOrder(t, dest.fake)
	rep = b.report(t)
	require.Nil(t, rep.Destinations[0].Paused)
	require.Empty(t, rep.Sources[0].Stopped)
	waitFor(t, 30*time.Second, "the metrics say resumed", func() bool {
		m := metricsText(t, d.addr)
		return strings.Contains(m, `syncer_destination_paused{destination="crm"} 0`) &&
			strings.Contains(m, `syncer_source_stopped{destination="crm",source="notes"} 0`)
	})

	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), []string{"pause", "--destination", "nope", "--database-url", b.dsn}, &out, &errb)
	require.Equal(t, 2, code, errb.String())
	require.Contains(t, errb.String(), "--destination")
}
