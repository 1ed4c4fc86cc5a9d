package outbox

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/migrations"
)

// Wake appends an event and notifies, as the triggers would, in tx: for
// source src (jobs.Resources, or a configured source). A command that
// makes rows or keys pending without writing them (retry-failed, a
// source's resnapshot) calls it, so that a daemon takes the work at once
// and, if none listens, the relay's poll finds the event. Like a trigger's,
// the event exists only if tx commits.
func Wake(ctx context.Context, tx database.Querier, src string) error {
	// A configured source's notification names its op, as its capture
	// trigger's does; resources' triggers notify with no payload.
	op, payload := jobs.WakeOp(src), ""
	if src != jobs.Resources {
		payload = op
	}
	if _, err := tx.Exec(ctx, `INSERT INTO syncer_outbox (op) VALUES ($1)`, op); err != nil {
		return fmt.Errorf("outbox: wake: %w", err)
	}
	return notify(ctx, tx, payload)
}

func notify(ctx context.Context, tx database.Querier, payload string) error {
	var schema *string
	if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil || schema == nil {
		return fmt.Errorf("outbox: notify: no current schema: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, migrations.Channel(*schema), payload); err != nil {
		return fmt.Errorf("outbox: notify: %w", err)
	}
	return nil
}
