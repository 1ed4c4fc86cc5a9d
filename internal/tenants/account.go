package tenants

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// noteAccount compares the account e's row sends it to with the one
// recorded for the tenant in syncer_state and, when it changed, records
// the new one and queues the replay of the tenant's live rows
// (Config.Replay), in one transaction: a daemon that stops after the
// change was seen has either queued the replay or recorded nothing, and
// the next read finds the change again. The row is read again under the
// record's lock, so two daemons never both queue one, nor does one that
// read the row before the change undo it. A tenant seen for the first
// time gets no replay: its rows go to its account as they are exported.
// A failure is logged; the next read of the row tries again.
//
// The read takes a slot of the gate, waiting at most QueryWait, before
// its transaction takes a connection, and frees it once the row is read:
// a connections table locked by a migration then holds no more of the
// pool than the registry's own reads do (contract section 10.1), where
// every tenant noting its account at once held a connection in the
// lock's queue. No slot in time: compared at the next read of the row.
func (r *Registry) noteAccount(ctx context.Context, e *entry) {
	if err := r.cfg.Queries.wait(ctx, QueryWait); err != nil {
		r.logger.DebugContext(ctx, "tenants: compare the tenant's account with the one recorded: no slot of the tenants query's gate; tried again at the next read of its row",
			slog.String("tenant", e.tenant), slog.String("error", err.Error()))
		return
	}
	slot := true
	free := func() {
		if slot {
			slot = false
			r.cfg.Queries.release()
		}
	}
	defer free()
	ns := r.namespace(e.tenant)
	var (
		seen    string
		replays []int64
		changed bool
	)
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		was, known, err := breakerstore.LockAccount(ctx, tx, ns)
		if err != nil {
			return err
		}
		conn, err := readInTx(ctx, tx, r.cfg.Settings.Query, e.tenant, r.timeout())
		free() // the replay, if any, is not the query's
		if re := (*rowError)(nil); errors.As(err, &re) || (err == nil && conn == nil) {
			return nil // an unusable or missing row: nothing to compare
		}
		if err != nil {
			return err
		}
		seen = conn.account
		if known && was.Fingerprint == seen {
			return nil
		}
		if err := breakerstore.SetAccount(ctx, tx, ns, breakerstore.Account{Fingerprint: seen}); err != nil {
			return err
		}
		if !known {
			return nil
		}
		changed = true
		replays, err = r.cfg.Replay(ctx, tx, e.tenant)
		return err
	})
	if err != nil {
		r.logger.WarnContext(ctx, "tenants: compare the tenant's account with the one recorded; tried again at the next read of its row",
			slog.String("tenant", e.tenant), slog.String("error", err.Error()))
		return
	}
	e.account = seen
	if changed {
		r.logger.InfoContext(ctx, "tenants: the tenant's account changed (its url or account column): its live rows are replayed to the new one",
			slog.String("tenant", e.tenant), slog.Any("replays", replays))
	}
}
