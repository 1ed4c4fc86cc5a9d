package delivery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// ErrHeld says a person paused the destination (syncer pause, the
// console): nothing is sent, every pending row is kept, until resumed.
var ErrHeld = errors.New("delivery: destination paused by a person")

// holdWait is how long a request refused by a person's pause waits before
// it looks again: a resume takes effect within it and loadEvery.
const holdWait = 2 * time.Second

// adoptPerson takes what a person asked of every daemon, from the shared
// facts: a pause (or its end), and a probe of a held destination now.
func (d *Deliverer) adoptPerson(ctx context.Context, st breakerstore.State, first bool) {
	d.AdoptHold(ctx, st.Hold)
	if st.Probe.At.IsZero() {
		return
	}
	at := st.Probe.At.UnixNano()
	if prev := d.probedAt.Swap(at); first || prev >= at {
		return // the first read only learns what was asked before this process
	}
	d.probeFor.Store(at)
	d.mu.Lock()
	probed := false
	for _, r := range []*refusal{&d.creds, &d.conf} {
		if r.state == refusalStanding {
			r.until, probed = time.Time{}, true
		}
	}
	d.mu.Unlock()
	if probed {
		d.logger.InfoContext(ctx, "delivery: a person asked for a probe of the held destination now", slog.String("by", st.Probe.By))
	}
}

// AdoptHold takes a person's pause (or its end) as read from the shared
// facts, unless a later generation is held already: a read that began
// before a pause and ended after it must not undo it. Once it returns, no
// request starts that the hold it holds forbids (attempt checks before
// every try, after its batch was read), which is what a daemon says to
// internal/presence; it returns the generation it holds. The pause's start
// and end are logged once each, at info: a person asked for them.
func (d *Deliverer) AdoptHold(ctx context.Context, h breakerstore.Hold) int64 {
	d.holdMu.Lock()
	defer d.holdMu.Unlock()
	if h.Generation < d.holdGen {
		return d.holdGen
	}
	d.holdGen = h.Generation
	if d.hold.Swap(h.Paused) == h.Paused {
		return d.holdGen
	}
	if h.Paused {
		d.logger.InfoContext(ctx, "delivery: destination paused by a person; nothing is sent to it and its pending rows are kept until it is resumed",
			slog.String("by", h.By), slog.Time("since", h.Since))
	} else {
		d.logger.InfoContext(ctx, "delivery: destination resumed by a person; sending again",
			slog.String("by", h.By), slog.Time("since", h.Since))
	}
	return d.holdGen
}

// checkHold returns a *WaitError while a person's pause holds.
func (d *Deliverer) checkHold() error {
	if !d.hold.Load() {
		return nil
	}
	return &WaitError{Err: ErrHeld, Wait: holdWait}
}
