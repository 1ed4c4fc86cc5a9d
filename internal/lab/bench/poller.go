package bench

// This file is a BASELINE, not a product path: a plain polling exporter,
// as a team writes one without syncer and as general-purpose pipelines
// run one (Bento's sql_select polled every 20 ms, in the comparison that
// opened issue 32): every interval, select the unsynced rows, post them,
// mark them. The receipt scenario runs it as a process of its own, as the
// daemon is, and sets the daemon's CPU per row at 500 inserts a second
// against its own, measured in the same run.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// pollerEvery is the plain poller's interval.
const pollerEvery = 20 * time.Millisecond

// PlainPoller exports the rows of resources in the database at dsn (its
// search_path names the schema) to the fake third party at url, looking
// every interval, until ctx ends. It holds one connection and sends one
// request at a time, as such an exporter does.
func PlainPoller(ctx context.Context, dsn, url string, every time.Duration) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("plain poller: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	client, err := thirdparty.New(&thirdparty.Config{URL: url})
	if err != nil {
		return err
	}
	defer client.Close()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := exportOnce(ctx, conn, client, 500, "plain-poller"); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
