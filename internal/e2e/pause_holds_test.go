package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 45: syncer pause returns once every running daemon holds the
// pause, so a row written after it returns is not sent. Two daemons share
// a source whose writer keeps them pushing (each deliverer read the shared
// facts less than a second ago, which is when a daemon used to adopt a
// pause late); rows written right after pause returns never reach the
// fake until resume, which returns once both send again. A daemon that
// does not take a pause within --within is named, and pause exits 1.
func TestPauseHoldsWhenItReturns(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	cfg := b.installNotesToCRM(t, dest.url)
	for range 2 {
		b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })
	}
	b.exec(t, `INSERT INTO notes VALUES (1, 'first')`)
	b.waitSourcesDrained(t, "notes")

	// A writer keeps the export busy while pause runs.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := int64(2); !stop.Load(); i++ {
			_, _ = b.pool.Exec(context.Background(), `INSERT INTO notes VALUES ($1, 'before')`, i)
			time.Sleep(10 * time.Millisecond)
		}
	})
	time.Sleep(time.Second)
	require.Contains(t, b.syncer(t, "pause", "--destination", "crm"), "every running daemon holds the pause")
	b.exec(t, `INSERT INTO notes SELECT g, 'after' FROM generate_series(1000000, 1000019) g`)
	stop.Store(true)
	wg.Wait()

	time.Sleep(3 * time.Second)
	for id := range byID(dest.fake) {
		require.Less(t, len(id), 7, "row %s, written after pause returned, was sent", id)
	}
	require.GreaterOrEqual(t, b.sourceStats(t)["notes"].PendingKeys, int64(20), "the rows written after the pause are pending")

	require.Contains(t, b.syncer(t, "resume", "--destination", "crm"), "every running daemon sends to it again")
	b.waitSourcesDrained(t, "notes")
	got := byID(dest.fake)
	for id := 1000000; id < 1000020; id++ {
		require.Len(t, got[fmt.Sprint(id)], 1, "row %d sent once after resume", id)
	}
	requireOnceInOrder(t, dest.fake)

	// A daemon alive by its lease that never takes the pause: named, exit 1.
	b.exec(t, `INSERT INTO syncer_daemons (daemon, destination, generation, seen_until) VALUES ('frozen:1:abc', 'crm', 0, now() + interval '1 hour')`)
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), []string{"pause", "--destination", "crm", "--within", "1s", "--database-url", b.dsn}, &out, &errb)
	require.Equal(t, 1, code, errb.String())
	require.Contains(t, errb.String(), "did not take it within 1s: frozen:1:abc")
	require.Contains(t, errb.String(), "1 running daemon(s)", "only the frozen daemon is named")
}
