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
	if d.hold.Swap(st.Hold.Paused) != st.Hold.Paused {
		d.logger.WarnContext(ctx, "delivery: destination paused or resumed by a person", slog.Bool("paused", st.Hold.Paused),
			slog.String("by", st.Hold.By), slog.Time("since", st.Hold.Since))
	}
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

// checkHold returns a *WaitError while a person's pause holds.
func (d *Deliverer) checkHold() error {
	if !d.hold.Load() {
		return nil
	}
	return &WaitError{Err: ErrHeld, Wait: holdWait}
}
