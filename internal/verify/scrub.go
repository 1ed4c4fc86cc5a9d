package verify

import (
	"encoding/json"

	"github.com/syncer-dev/syncer/internal/redact"
)

// scrubber is a Sender that knows its destination's secrets (a
// *thirdparty.Client): Scrub removes every form of them from a text.
type scrubber interface{ Scrub(string) string }

// scrubbed is an example's side as the destination holds it, without the
// destination's (or the tenant's) secrets in any form: a third party that
// stored what it was sent (an Authorization header copied into a field)
// shows it whole otherwise, in the text, in --json and in the progress
// kept in the database. Only the examples pay for it, not every payload
// read.
func scrubbed(rd Reader, raw json.RawMessage) json.RawMessage {
	var c Sender
	switch r := rd.(type) {
	case *SyncerReader:
		c = r.Client
	case *ElasticsearchReader:
		c = r.Client
	case *CustomReader:
		c = r.Client
	}
	s, ok := c.(scrubber)
	if !ok || raw == nil {
		return raw
	}
	return redact.JSON(raw, s.Scrub)
}
