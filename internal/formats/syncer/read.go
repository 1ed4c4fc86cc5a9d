package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/syncer-dev/syncer/internal/formats/readback"
)

// ReadSettings are the syncer format's verify settings: its read API
// (/v1/lookup) takes none.
type ReadSettings struct{}

// Reader returns the reader of a's account.
func (ReadSettings) Reader(a *readback.Account) (readback.Reader, error) {
	return &Reader{Client: a.Client}, nil
}

// Reader reads a destination of the syncer format:
// POST {URL}/v1/lookup with {"ids": [...]}, answered
// {"items": [{"id", "version", "payload"} or {"id", "version", "deleted": true}]}.
// An id left out is absent there; an item with neither payload nor
// deleted (an "error" for that id) is unknown.
type Reader struct {
	// Client sends the requests to the destination's base URL, with its
	// credentials, headers and TLS. Required.
	Client readback.Sender
	// Tries says how a transient failure is tried again.
	readback.Tries
}

var _ readback.Reader = (*Reader)(nil)

type lookupAnswer struct {
	Items []struct {
		ID      json.RawMessage `json:"id"`
		Version int64           `json:"version"`
		Payload json.RawMessage `json:"payload"`
		Deleted bool            `json:"deleted"`
	} `json:"items"`
}

// Lookup asks for ids in one request.
func (r *Reader) Lookup(ctx context.Context, ids []string) (map[string]readback.There, error) {
	raw, err := r.PostIDs(ctx, r.Client, "/v1/lookup", ids)
	if err != nil {
		return nil, err
	}
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

// Scrubber removes the destination's secrets from a text (an example of
// what it holds); nil when its client knows none.
func (r *Reader) Scrubber() func(string) string { return readback.ScrubberOf(r.Client) }

// idText is an id as a string: a JSON string's text, or a number's digits
// for a third party that answers ids as numbers.
func idText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}
