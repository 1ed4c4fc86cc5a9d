package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// clearAfter is how long a success waits after the last failure before it
// clears the recorded last error, so a destination failing every other
// request does not write the store at every turn.
const clearAfter = time.Second

// succeeded clears the last error, here and in the store, once requests
// succeed again: status's last error is then that of an outage still
// going on, not of one long over. A cleared error is stored with its time
// and no text. The first success of a process clears what an earlier one
// left recorded.
func (d *Deliverer) succeeded(ctx context.Context) {
	if d.clean.Load() {
		return // nothing failed since the last clear: the common case
	}
	now := d.now()
	d.mu.Lock()
	if !d.failure.At.IsZero() && now.Sub(d.failure.At) < clearAfter {
		d.mu.Unlock()
		return
	}
	if !d.clean.CompareAndSwap(false, true) {
		d.mu.Unlock()
		return // another request clears it
	}
	d.failure, d.written = breakerstore.LastError{}, breakerstore.LastError{}
	d.mu.Unlock()
	if d.store == nil {
		return
	}
	wctx, cancel := d.writeContext(ctx)
	defer cancel()
	if err := d.store.SetLastError(wctx, breakerstore.LastError{At: now.UTC()}); err != nil {
		d.logger.WarnContext(ctx, "delivery: clear the last error", slog.String("error", err.Error()))
	}
}
