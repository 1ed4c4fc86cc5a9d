package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A grant's transaction holds the tenant's refresh lock while the token
// endpoint is asked; but the lock is its session's, and a session the
// database ends mid-grant (pg_terminate_backend, a restart, a connection
// cut) lets it go while the request is still on its way: another process
// would take the lock, read the token still stored and spend it again,
// and an endpoint that revokes the family on reuse would refuse the
// tenant (the soak, seed 20261125: a pg-terminate during two grants). So
// before it asks, a grant claims the tenant in a transaction committed of
// its own, under the lock: a row of syncer_state naming the process
// (tokenMemory.owner). Another process's grant that finds a claim of
// someone else's younger than claimLife waits for it to go, as it waits
// for the lock. The grant's own transaction deletes the claim with the
// store; when that transaction fails, keepStoring deletes it with the
// retried store. A live process touches its claim while keepStoring
// retries (claimTouchEvery), so only a claim whose process died mid-grant
// goes untouched: it stands claimLife from its last touch.

const (
	// claimLife is how long a claim stands untouched when its process
	// never released it (it died mid-grant): past it, the tenant's token
	// is spent by others as stored. A live process releases or touches
	// its claim within grantTimeout of taking it (the grant's
	// transaction, then keepStoring's first try), and every
	// claimTouchEvery after; the rest is slack for a slow database. Two
	// minutes held every row of a tenant whose grant a SIGKILL cut that
	// long (the soak, seed 20261125: the whole drain waited on it).
	claimLife = grantTimeout + 3*claimTouchEvery
	// claimTouchEvery spaces the touches of a claim this process keeps
	// while its rotated token waits to be stored (keepStoring).
	claimTouchEvery = 5 * time.Second
	// claimPoll is the wait between looks at another process's claim.
	claimPoll = 200 * time.Millisecond
	// claimSuffix ends the key of a tenant's claim in its namespace.
	claimSuffix = ":refresh_claim"
)

// errGrantInFlight is a grant's answer when another process's claim of
// the tenant stood for the whole wait: a transient failure, tried again
// with the delivery's backoff.
var errGrantInFlight = errors.New("tenants: another process's refresh grant of the tenant is in flight (or it stopped mid-grant): waiting for it, or for its claim to lapse")

// claim waits, up to grantTimeout and while ctx lasts, until no other
// process claims the tenant, then claims it for this one. The caller
// counts the grant (tokenMemory.beginGrant) first.
func (g *refreshGrant) claim(ctx context.Context, conn *pgxpool.Conn) error {
	owner := g.mem.ownerID()
	deadline := time.Now().Add(grantTimeout)
	for {
		busy := false
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, refreshLockClass, g.lockKey); err != nil {
				return fmt.Errorf("tenants: take the tenant's refresh lock: %w", err)
			}
			var other []byte
			var age float64
			err := tx.QueryRow(ctx, `SELECT value, extract(epoch FROM now() - updated_at)::float8 FROM syncer_state WHERE key = $1`, g.claimKey).Scan(&other, &age)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return fmt.Errorf("tenants: read the tenant's refresh claim: %w", err)
			case string(other) != owner && age < claimLife.Seconds():
				busy = true
				return nil
			}
			g.mem.markClaimed()
			if _, err := tx.Exec(ctx, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, $2, now())
				ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`, g.claimKey, []byte(owner)); err != nil {
				return fmt.Errorf("tenants: claim the tenant's refresh grant: %w", err)
			}
			return nil
		})
		switch {
		case err != nil:
			return err
		case !busy:
			return nil
		case time.Now().After(deadline):
			return errGrantInFlight
		}
		t := time.NewTimer(claimPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// unclaim deletes this process's claim of the tenant in tx.
func (g *refreshGrant) unclaim(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `DELETE FROM syncer_state WHERE key = $1 AND value = $2`, g.claimKey, []byte(g.mem.ownerID())); err != nil {
		return fmt.Errorf("tenants: release the tenant's refresh claim: %w", err)
	}
	return nil
}

// waitClaimed waits d, touching this process's claim of the tenant (if it
// holds one) first and every claimTouchEvery meanwhile, so that other
// processes see it is alive and keep waiting for its store. It reports
// false when ctx ended first.
func (g *refreshGrant) waitClaimed(ctx context.Context, d time.Duration) bool {
	for {
		if _, claimed := g.mem.releasable(); claimed {
			g.touchClaim(ctx)
		}
		step := min(d, claimTouchEvery)
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		if d -= step; d <= 0 {
			return true
		}
	}
}

// touchClaim renews this process's claim of the tenant, if it still
// stands. A failure is left to the next touch: the database is what the
// others need to spend the token too.
func (g *refreshGrant) touchClaim(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, claimTouchEvery)
	defer cancel()
	if _, err := g.pool.Exec(ctx, `UPDATE syncer_state SET updated_at = now() WHERE key = $1 AND value = $2`, g.claimKey, []byte(g.mem.ownerID())); err != nil {
		g.logger.DebugContext(ctx, "tenants: touch the tenant's refresh claim", slog.String("error", err.Error()))
	}
}
