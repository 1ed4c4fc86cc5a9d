package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A rotated refresh token that on_refresh could not store inside its
// grant's transaction (the statement failed, the database restarted under
// it, the commit failed) is in this process's memory only, and the row
// still gives the token the endpoint took: any other process's grant
// would spend that one again, and an endpoint that revokes the whole
// family on reuse would refuse the tenant for good. So the store is
// retried behind the grant, on connections of its own, until it succeeds
// or the row gives a token this process never spent (docs/design.md, "A
// refresh token spent once").

const (
	// storeRetryFirst is the wait before the first retry: short, since the
	// usual cause (a connection dropped) is over at once on a new one.
	storeRetryFirst = 100 * time.Millisecond
	// storeRetryMax caps the wait while the database cannot be reached:
	// once it can, another process's grant may come at any moment, and
	// the store must come first.
	storeRetryMax = 2 * time.Second
	// storeRetryFailing caps the wait while on_refresh itself fails (its
	// SQL, a constraint): retrying it more often would not help, and a
	// destination's every tenant may be retrying.
	storeRetryFailing = time.Minute
	// StoreGrace is how long Close lets stores being retried go on: a
	// process that stops holding a token it could not store leaves the row
	// with a spent one.
	StoreGrace = 10 * time.Second
)

// laterStores are the stores being retried behind their grants, one
// goroutine per tenant at most (tokenMemory.storing).
type laterStores struct {
	ctx  context.Context
	stop context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newLaterStores() *laterStores {
	ctx, stop := context.WithCancel(context.Background())
	return &laterStores{ctx: ctx, stop: stop}
}

// add counts one more store goroutine, unless close began.
func (l *laterStores) add() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	return true
}

// close waits up to grace for the stores being retried, then stops them.
func (l *laterStores) close(grace time.Duration) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	t := time.AfterFunc(grace, l.stop)
	l.wg.Wait()
	t.Stop()
	l.stop()
}

// storeLater starts the goroutine that stores the token this process
// holds for the tenant, unless one runs already (it stores whatever token
// is held when it next tries).
func (g *refreshGrant) storeLater() {
	if g.later == nil || !g.mem.startStoring() {
		return
	}
	if !g.later.add() {
		g.mem.stopStoring()
		g.logger.Error("tenants: the token endpoint rotated the tenant's refresh token while this process stops, and it could not be stored; the row still gives the spent token, which an endpoint that revokes the family on reuse refuses: connect the tenant again if it is refused")
		return
	}
	go g.keepStoring(g.later.ctx)
}

// keepStoring retries storing the held token with backoff until it is
// stored, the row gives a token this process never spent, or ctx ends.
func (g *refreshGrant) keepStoring(ctx context.Context) {
	defer g.later.wg.Done()
	began := time.Now()
	wait := storeRetryFirst
	var warned time.Time
	for tries := 1; ; tries++ {
		if !g.waitClaimed(ctx, wait) {
			g.mem.stopStoring()
			g.logger.Error("tenants: this process stops without having stored the tenant's rotated refresh token (on_refresh); the row still gives the spent token, which an endpoint that revokes the family on reuse refuses: connect the tenant again if it is refused",
				slog.Int("tries", tries-1), slog.String("for", time.Since(began).Round(time.Millisecond).String()))
			return
		}
		outcome, err := g.storeHeld(ctx)
		if err != nil {
			if now := time.Now(); now.Sub(warned) >= time.Minute {
				warned = now
				g.logger.Warn("tenants: storing the tenant's rotated refresh token failed again; retried, and this process sends with it meanwhile",
					slog.Int("tries", tries), slog.String("error", g.scrub(pgText(err, 0).Error())))
			}
			if statementFailed(err) {
				wait = min(2*wait, storeRetryFailing)
			} else {
				wait = min(2*wait, storeRetryMax)
			}
			continue
		}
		switch outcome {
		case storedHeld:
			g.logger.Info("tenants: the tenant's rotated refresh token is stored (on_refresh), after retrying",
				slog.Int("tries", tries), slog.String("after", time.Since(began).Round(time.Millisecond).String()))
		case foundHeld:
			g.logger.Info("tenants: the tenant's rotated refresh token was stored after all (the transaction that stored it failed only in its answer)",
				slog.Int("tries", tries))
		case foundNewer:
			g.logger.Info("tenants: the tenant's row gives a refresh token this process never spent (connected again, or its row deleted): the rotated token it held is not stored",
				slog.Int("tries", tries))
		case grantBusy:
			// A grant of this process is on its way; it settles what it
			// can, this tries again after it.
			wait = storeRetryFirst
			continue
		}
		if g.mem.doneStoring(g.onRefresh != "") {
			return
		}
		// Rotated again meanwhile, and that store failed too.
		wait = storeRetryFirst
	}
}

// storeOutcome is what one retried store found.
type storeOutcome int

const (
	storedHeld  storeOutcome = iota // on_refresh stored the held token
	foundHeld                       // the row gives it already: a commit failed only in its answer
	foundNewer                      // the row gives a token this process never spent, or none
	nothingHeld                     // no token to store: only this process's claim, released
	grantBusy                       // a grant of this process is on its way: nothing done
)

// storeHeld is one try at storing the token this process holds: on a
// connection of its own, under the tenant's refresh lock, and only while
// the row gives a token this process spent (a compare-and-store), since
// any other token was stored since by someone else and is newer. It
// releases this process's claim of the tenant (claim.go) in the same
// transaction, unless a grant of it is on its way.
func (g *refreshGrant) storeHeld(ctx context.Context) (storeOutcome, error) {
	free, claimed := g.mem.releasable()
	if !free {
		return grantBusy, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	conn, err := g.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("a connection: %w", err)
	}
	defer conn.Release()
	var (
		outcome storeOutcome
		held    string
	)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, refreshLockClass, g.lockKey); err != nil {
			return fmt.Errorf("take the tenant's refresh lock: %w", err)
		}
		if claimed {
			if err := g.unclaim(ctx, tx); err != nil {
				return err
			}
		}
		// Read under the lock: a grant of this process rotates the
		// token held under it too (tokenMemory.rotated).
		var (
			spent    []string
			unstored bool
		)
		held, spent, unstored = g.mem.pending()
		if !unstored || g.onRefresh == "" {
			outcome = nothingHeld
			return nil
		}
		stored, err := g.stored(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case stored == held:
			outcome = foundHeld
		case stored == "" || !slices.Contains(spent, stored):
			outcome = foundNewer
		default:
			outcome = storedHeld
			if _, err := tx.Exec(ctx, g.onRefresh, g.tenant, held); err != nil {
				return fmt.Errorf("tenants.on_refresh: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if claimed {
		g.mem.released()
	}
	if outcome != nothingHeld {
		g.mem.stored(held)
	}
	return outcome, nil
}

// statementFailed reports whether err is on_refresh's (or the query's)
// own failure, which retrying soon does not mend, rather than the
// database being out of reach: a connection lost, a shutdown, a
// serialization failure, a timeout.
func statementFailed(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "08", "40", "53", "57", "58":
		return false
	}
	return pe.Code != "55P03" // lock_not_available
}
