// Package outbox relays the events that writers append to syncer_outbox into
// the River jobs of their sources (one job kind, jobs.ExportArgs, for
// resources and every configured source), and controls the gate that
// decides whether writers append events at all.
//
// Guarantees:
//   - An event is deleted only in the transaction that made sure a job of its
//     source is pending (inserted one, or found one not yet running), or
//     after a job of the source lingering in this process took the
//     notification (Waker.Wake), which it takes only while it will look
//     again. So no event is dropped because a job was already running:
//     River's uniqueness would count a running job as a duplicate, which is
//     why the relay does its own check and does not use unique jobs.
//   - At most one job per source is pending at a time, however many daemons
//     relay: relays serialise on a transaction-level advisory lock.
//   - A lost notification delays an export by at most PollInterval: the relay
//     also polls, for events and for sources with work.
package outbox

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/database"
)

// Pending counts events not yet relayed.
func Pending(ctx context.Context, q database.Querier) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM syncer_outbox`).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: count: %w", err)
	}
	return n, nil
}
