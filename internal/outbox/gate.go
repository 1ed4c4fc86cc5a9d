package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// SetArmed opens (armed) or shuts the gate. While armed, and while a relay's
// lease is valid (RenewLease), every statement that inserts, deletes or
// changes a payload appends an event and notifies; while shut, writers pay
// only for reading one row, and a source's job finds new rows by polling. The
// change is not worth an fsync: after a crash the daemon starts by draining
// anyway.
func SetArmed(ctx context.Context, tx pgx.Tx, armed bool) error {
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
		return fmt.Errorf("outbox: gate: %w", err)
	}
	_, err := tx.Exec(ctx, `UPDATE syncer_gate SET armed = $1, armed_at = now() WHERE armed <> $1`, armed)
	if err != nil {
		return fmt.Errorf("outbox: gate: %w", err)
	}
	return nil
}

// RenewLease extends the gate's lease to ttl from now. The gate lets writers
// notify only while the lease is valid: a relay renews it while it listens,
// so with no daemon alive the gate closes itself within ttl and writers stop
// paying for events nobody hears. Never shortens a lease another daemon
// holds.
func RenewLease(ctx context.Context, db database.Querier, ttl time.Duration) error {
	_, err := db.Exec(ctx, `UPDATE syncer_gate SET lease_until = greatest(lease_until, now() + make_interval(secs => $1))`, ttl.Seconds())
	if err != nil {
		return fmt.Errorf("outbox: renew gate lease: %w", err)
	}
	return nil
}
