package breakerstore

import (
	"context"
	"time"
)

// KeyHold holds a Hold: a destination paused by a person.
const KeyHold = "hold"

// Hold is a pause a person asked for (syncer pause, or the console), as
// opposed to the third party's Pause: it has no end of its own, nothing is
// sent while it holds, and it lasts until a person resumes the destination.
type Hold struct {
	Paused bool `json:"paused"`
	// Since is when it was paused (or resumed).
	Since time.Time `json:"since,omitzero"`
	// By says who asked: "console" or "command line".
	By string `json:"by,omitempty"`
}

// SetHold records that a person paused (or resumed) the destination; Since
// is set to now when zero.
func (s *Store) SetHold(ctx context.Context, h Hold) error {
	if h.Since.IsZero() {
		h.Since = s.now().UTC()
	}
	return s.put(ctx, KeyHold, h)
}

// KeyProbe holds a Probe: a person asked to probe a held destination now.
const KeyProbe = "probe"

// Probe is a person's request to probe a destination held by a refusal
// (credentials or configuration) now rather than at the next probe
// interval: after a fix, nobody waits.
type Probe struct {
	// At is when it was asked; a daemon probes once per new At.
	At time.Time `json:"at"`
	By string    `json:"by,omitempty"`
}

// SetProbe records a request to probe now; At is set to now when zero.
func (s *Store) SetProbe(ctx context.Context, p Probe) error {
	if p.At.IsZero() {
		p.At = s.now().UTC()
	}
	return s.put(ctx, KeyProbe, p)
}
