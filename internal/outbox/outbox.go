// Package outbox relays the events that writers append to syncer_outbox into
// River sync jobs, and controls the gate that decides whether writers append
// events at all.
//
// Guarantees:
//   - An event is deleted only in the transaction that made sure a sync job
//     is pending (inserted one, or found one not yet running), by a running
//     sync job that will look at the table afterwards, or after a job of the
//     feed lingering in this process took the notification (Waker.Wake),
//     which it takes only while it will look again. So no event is dropped
//     because a job was already running: River's uniqueness would count a
//     running job as a duplicate, which is why the relay does its own check
//     and does not use unique jobs.
//   - At most one sync job is pending at a time, however many daemons relay:
//     relays serialise on a transaction-level advisory lock.
//   - A lost notification delays an export by at most PollInterval: the relay
//     also polls, for events and for pending rows.
package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/migrations"
)

// sourceOps matches the op of every event of a configured source.
const sourceOps = migrations.SourceOpPrefix + "%"

// Execer runs a statement.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Consume deletes every event of resources no other relay is handling. The
// sync job calls it before it scans the table, so the events it deletes
// are covered by that scan. Events of configured sources (op
// migrations.SourceOp(name)) are the relay's, for the sources' own jobs.
func Consume(ctx context.Context, db Execer) error {
	_, err := db.Exec(ctx, `DELETE FROM syncer_outbox WHERE id IN
		(SELECT id FROM syncer_outbox WHERE op NOT LIKE $1 ORDER BY id LIMIT 10000 FOR UPDATE SKIP LOCKED)`, sourceOps)
	if err != nil {
		return fmt.Errorf("outbox: consume: %w", err)
	}
	return nil
}

// Pending counts events not yet relayed.
func Pending(ctx context.Context, q resources.Querier) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM syncer_outbox`).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: count: %w", err)
	}
	return n, nil
}
