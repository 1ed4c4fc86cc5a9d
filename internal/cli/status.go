package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/status"
)

// StatusCmd is `syncer status`.
type StatusCmd struct {
	DB
	JSON bool `name:"json" help:"Print one JSON object instead of a table."`
}

// Run prints the status.
func (c *StatusCmd) Run(ctx context.Context, env *Env) error {
	pool, err := database.Open(ctx, c.DatabaseURL, "syncer-status")
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := status.Gather(ctx, pool)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	w := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "rows\t%d total, %d synced, %d unsynced (%d pending, %d failed)\n", r.Total, r.Synced, r.Unsynced, r.Pending, r.Failed)
	fmt.Fprintf(w, "oldest pending\t%s\n", (time.Duration(r.OldestUnsyncedAgeSeconds * float64(time.Second))).Round(time.Millisecond))
	fmt.Fprintf(w, "outbox pending\t%d\n", r.OutboxPending)
	if r.Lock.Held {
		fmt.Fprintf(w, "export lock\theld by pid %d (%s %s)\n", r.Lock.PID, r.Lock.ApplicationName, r.Lock.ClientAddr)
	} else {
		fmt.Fprintf(w, "export lock\tfree\n")
	}
	b := r.Breaker.State
	if !r.Breaker.Until.IsZero() {
		b += " until " + r.Breaker.Until.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "circuit breaker\t%s\n", b)
	if r.Credentials.Refused {
		fmt.Fprintf(w, "credentials\tREFUSED by the third party since %s: %s\n", r.Credentials.Since.Format(time.RFC3339), r.Credentials.Message)
	} else {
		fmt.Fprintf(w, "credentials\tok\n")
	}
	for k, n := range r.Jobs {
		fmt.Fprintf(w, "job %s\t%d\n", k, n)
	}
	for _, cp := range r.Checkpoints {
		fmt.Fprintf(w, "checkpoint %s\tlast id %d, %d rows, %d failed, %d batches, updated %s\n",
			cp.Name, cp.LastID, cp.RowsDone, cp.RowsFailed, cp.BatchesDone, cp.UpdatedAt.Format(time.RFC3339))
	}
	for _, rp := range r.Replays {
		fmt.Fprintf(w, "replay %d\t%s, %d of %d rows (%.1f%%)\n", rp.ID, rp.State, rp.RowsDone, rp.TotalRows, rp.Percent)
	}
	for _, f := range r.RecentFailures {
		fmt.Fprintf(w, "failed row %d v%d\t%s: %s\n", f.ID, f.Version, f.FailedAt.Format(time.RFC3339), f.Error)
	}
	return w.Flush()
}
