package delivery

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// pauseLeft is how long the pause still holds.
func (d *Deliverer) pauseLeft() time.Duration {
	if !d.held.Load() {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pause.until.Sub(d.now())
}

// heldLocked sets held from what it stands for, forgetting a pause that
// has ended.
func (d *Deliverer) heldLocked(now time.Time) {
	if !d.pause.until.After(now) {
		d.pause.until = time.Time{}
	}
	d.held.Store(!d.pause.until.IsZero() || d.creds.state != refusalNone || d.conf.state != refusalNone)
}

// waitPause returns once no pause holds, waiting at most MaxInlineWait; a
// longer pause is returned as a *WaitError at once.
func (d *Deliverer) waitPause(ctx context.Context) error {
	for d.held.Load() {
		now := d.now()
		d.mu.Lock()
		wait, cause := d.pause.until.Sub(now), d.pause.err
		d.heldLocked(now)
		d.mu.Unlock()
		if wait <= 0 {
			return nil
		}
		if wait > d.cfg.MaxInlineWait {
			return &WaitError{Err: cause, Wait: wait}
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
	return nil
}

// pauseKind says who asked for a pause.
type pauseKind int

const (
	// pauseBudget: this process's count of the quota says nothing is left.
	pauseBudget pauseKind = iota
	// pauseQuota: an answer said nothing of the quota remains.
	pauseQuota
	// pauseRetryAfter: a 429 with Retry-After.
	pauseRetryAfter
)

// setPause lets nothing through before until. A pause the third party asked
// for is written to the store, so another daemon honours it, and its
// beginning is logged: at warn for a Retry-After, at info for a quota used
// up (the expected end of every window when the quota is what limits).
func (d *Deliverer) setPause(ctx context.Context, until time.Time, cause error, text string, kind pauseKind) {
	now := d.now()
	d.mu.Lock()
	if !until.After(d.pause.until) {
		d.mu.Unlock()
		return
	}
	began := !d.pause.until.After(now)
	d.pause.until, d.pause.err = until, cause
	d.held.Store(true)
	write := kind != pauseBudget && d.store != nil && until.Sub(d.pause.stored) >= time.Second
	if write {
		d.pause.stored = until
	}
	d.mu.Unlock()
	if began && kind != pauseBudget {
		level := slog.LevelWarn
		if kind == pauseQuota {
			level = slog.LevelInfo
		}
		d.logger.Log(ctx, level, "delivery: the third party asked for a pause; nothing is sent until it ends",
			slog.Duration("pause", until.Sub(now)), slog.Time("until", until), slog.String("cause", text))
	}
	if write {
		wctx, cancel := d.writeContext(ctx)
		defer cancel()
		if err := d.store.SetPause(wctx, breakerstore.Pause{Until: until.UTC(), Cause: text, Status: http.StatusTooManyRequests}); err != nil {
			d.logger.WarnContext(ctx, "delivery: record the pause", slog.String("error", err.Error()))
		}
	}
}
