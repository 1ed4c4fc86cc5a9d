package verify

import (
	"encoding/json"

	"github.com/syncer-dev/syncer/internal/redact"
)

// scrubber is a Reader that knows its destination's secrets (every
// format's reader, through its client): Scrubber removes every form of
// them from a text, nil when it knows none.
type scrubber interface{ Scrubber() func(string) string }

// scrubbed is an example's side as the destination holds it, without the
// destination's (or the tenant's) secrets in any form: a third party that
// stored what it was sent (an Authorization header copied into a field)
// shows it whole otherwise, in the text, in --json and in the progress
// kept in the database. Only the examples pay for it, not every payload
// read.
func scrubbed(rd Reader, raw json.RawMessage) json.RawMessage {
	s, ok := rd.(scrubber)
	if !ok || raw == nil {
		return raw
	}
	scrub := s.Scrubber()
	if scrub == nil {
		return raw
	}
	return redact.JSON(raw, scrub)
}
