package breakerstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
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
	// Generation orders a destination's pauses and resumes: each SetHold
	// takes the next of one sequence (syncer_hold_generation), so a daemon
	// never takes an older hold for a newer one, and `syncer pause` can
	// wait until every daemon holds the one it wrote (internal/presence).
	// Zero for a hold recorded before it was kept.
	Generation int64 `json:"generation,omitempty"`
}

// SetHold records that a person paused (or resumed) the destination, under
// the next generation, and returns it as recorded; Since is set to now
// when zero.
func (s *Store) SetHold(ctx context.Context, h Hold) (Hold, error) {
	if h.Since.IsZero() {
		h.Since = s.now().UTC()
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if err := s.pool.QueryRow(ctx, `SELECT nextval('syncer_hold_generation')`).Scan(&h.Generation); err != nil {
		return Hold{}, fmt.Errorf("breakerstore: set %s: generation: %w", KeyHold, err)
	}
	return h, s.put(ctx, KeyHold, h)
}

// ReadHold reads the hold of a namespace (Config.Namespace) now, past any
// cache: what a daemon holds before it says so (internal/presence).
func ReadHold(ctx context.Context, q database.Querier, namespace string) (Hold, error) {
	var h Hold
	var data []byte
	err := q.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1`, keyPrefix(namespace)+KeyHold).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, fmt.Errorf("breakerstore: read %s: %w", KeyHold, err)
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return Hold{}, fmt.Errorf("breakerstore: read %s: %w", KeyHold, err)
	}
	return h, nil
}

// ReadHolds is ReadHold for several namespaces in one statement: the
// presence's beat reads every destination's hold twice a second, and one
// statement a destination kept a pooled connection for as many round trips
// (docs/design.md, "Spreading the periodic work"). The holds come in the
// order of namespaces, a namespace without one as the zero Hold.
func ReadHolds(ctx context.Context, q database.Querier, namespaces []string) ([]Hold, error) {
	keys := make([]string, len(namespaces))
	for i, ns := range namespaces {
		keys[i] = keyPrefix(ns) + KeyHold
	}
	rows, err := q.Query(ctx, `SELECT key, value FROM syncer_state WHERE key = ANY($1::text[])`, keys)
	if err != nil {
		return nil, fmt.Errorf("breakerstore: read %s: %w", KeyHold, err)
	}
	byKey := map[string]Hold{}
	var key string
	var data []byte
	if _, err := pgx.ForEachRow(rows, []any{&key, &data}, func() error {
		var h Hold
		if err := json.Unmarshal(data, &h); err != nil {
			return err
		}
		byKey[key] = h
		return nil
	}); err != nil {
		return nil, fmt.Errorf("breakerstore: read %s: %w", KeyHold, err)
	}
	out := make([]Hold, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out, nil
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

// KeyProbeAnswer holds a ProbeAnswer: what the probe a person asked for
// met.
const KeyProbeAnswer = "probe_answer"

// ProbeAnswer is the outcome of the request that probed a destination
// after a person asked (Probe), for `syncer probe` to wait for and print.
type ProbeAnswer struct {
	// For is the Probe.At it answers.
	For time.Time `json:"for"`
	// At is when the answer came.
	At time.Time `json:"at"`
	// Accepted says whether the destination took the request; Held
	// whether a refusal (of the credentials or the URL) still holds it.
	Accepted bool `json:"accepted"`
	Held     bool `json:"held"`
	// Status is the answer's HTTP status (a token endpoint's when the
	// request was not sent for it); 0 when no answer came.
	Status int `json:"status,omitempty"`
	// Text says what the answer was, as SafeText; "" when accepted.
	Text string `json:"text,omitempty"`
}

// SetProbeAnswer records the answer to a person's probe; At is set to
// now when zero.
func (s *Store) SetProbeAnswer(ctx context.Context, a ProbeAnswer) error {
	if a.At.IsZero() {
		a.At = s.now().UTC()
	}
	return s.put(ctx, KeyProbeAnswer, a)
}
