package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Writes that outpace the third party must not starve a replay: it gets its
// share of the batches, and the live job yields at its run limit.
func TestReplayGetsItsShareWhileWritesOutpaceTheThirdParty(t *testing.T) {
	t.Parallel()
	const (
		batch   = 10
		rate    = 20.0 // requests/s: 200 rows/s at most
		history = 2000
	)
	b := setup(t, fakethirdparty.Config{})
	b.fill(t, history)
	b.startDaemon(t, func(c *daemon.Config) {
		c.Exporter.BatchSize = batch
		c.Exporter.MaxRun = 3 * time.Second
		c.Delivery.RateLimit = rate
		c.Delivery.RateBurst = 1
	})
	b.waitDrained(t, 2*time.Minute)

	// Writers insert about twice what the third party takes.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = b.pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('live', g) FROM generate_series(1, 4) g`)
			}
		}
	})
	defer func() { stop(); wg.Wait() }()
	time.Sleep(2 * time.Second) // the live job is saturated

	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), []string{"replay", "--database-url", b.dsn, "--from-id", "1", "--to-id", fmt.Sprint(history), "--log-level", "error"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	start := time.Now()
	before := len(b.fake.Requests())
	waitFor(t, time.Minute, "replay progress", func() bool {
		cp, err := checkpoint.Get(context.Background(), b.pool, checkpoint.Replay(1))
		require.NoError(t, err)
		return cp.RowsDone >= 400
	})
	took := time.Since(start)
	cp, err := checkpoint.Get(context.Background(), b.pool, checkpoint.Replay(1))
	require.NoError(t, err)
	requests := len(b.fake.Requests()) - before
	share := float64(cp.BatchesDone) / float64(requests)
	t.Logf("replay: %d rows in %s while writers outpaced the third party; %d of %d requests (%.0f%%) were the replay's",
		cp.RowsDone, took.Round(100*time.Millisecond), cp.BatchesDone, requests, 100*share)
	require.Positive(t, cp.RowsDone, "the replay progresses")
	require.GreaterOrEqual(t, share, 0.15, "the replay gets its share (0.25 by default) of the requests")
	r := b.report(t)
	require.Positive(t, r.Pending, "live rows were still arriving faster than the third party took them")
}
