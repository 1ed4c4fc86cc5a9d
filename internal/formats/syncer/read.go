package syncer

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/syncer-dev/syncer/internal/formats/readback"
)

// ReadBack are the syncer format's verify settings: its read API,
// POST {URL}/v1/lookup with {"ids": [...]}, answered
// {"items": [{"id", "version", "payload"} or {"id", "version", "deleted": true}]}.
// An id left out is absent there; an item with neither payload nor
// deleted (an "error" for that id) is unknown.
var ReadBack = readback.IDs{Path: "/v1/lookup", Answer: readLookup}

// NewReader returns the reader of a destination of the syncer format
// that client sends to.
func NewReader(client readback.Sender) *readback.IDsReader {
	return &readback.IDsReader{Client: client, IDs: ReadBack}
}

type lookupAnswer struct {
	Items []struct {
		ID      json.RawMessage `json:"id"`
		Version int64           `json:"version"`
		Payload json.RawMessage `json:"payload"`
		Deleted bool            `json:"deleted"`
	} `json:"items"`
}

// readLookup reads a /v1/lookup answer.
func readLookup(raw []byte) (map[string]readback.There, error) {
	var ans lookupAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("lookup answer: %w", err)
	}
	out := make(map[string]readback.There, len(ans.Items))
	for _, it := range ans.Items {
		id := idText(it.ID)
		t := readback.There{Version: it.Version, Deleted: it.Deleted}
		if !it.Deleted {
			if len(it.Payload) == 0 {
				t.Unknown = true
			} else {
				t.Payload = it.Payload
			}
		}
		out[id] = t
	}
	return out, nil
}

// idText is an id as a string: a JSON string's text, or a number's digits
// for a third party that answers ids as numbers.
func idText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}
