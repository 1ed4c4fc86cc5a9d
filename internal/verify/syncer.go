package verify

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// LookupRetriesDefault is how often a lookup answered 429, 5xx or not at
// all is tried again before the run gives up (exit 1, resumable).
const LookupRetriesDefault = 5

// SyncerReader reads a destination of the syncer format:
// POST {URL}/v1/lookup with {"ids": [...]}, answered
// {"items": [{"id", "version", "payload"} or {"id", "version", "deleted": true}]}.
// An id left out is absent there; an item with neither payload nor
// deleted (an "error" for that id) is unknown.
type SyncerReader struct {
	// Client sends the requests to the destination's base URL, with its
	// credentials, headers and TLS (NewClient, or the daemon's settings).
	// Required.
	Client Sender
	// Retries is how often a transient failure is tried again. Defaults to
	// LookupRetriesDefault.
	Retries int
	// Sleep waits between tries. Defaults to a context-aware sleep.
	Sleep func(ctx context.Context, d time.Duration) error
}

var _ Reader = (*SyncerReader)(nil)

type lookupAnswer struct {
	Items []struct {
		ID      json.RawMessage `json:"id"`
		Version int64           `json:"version"`
		Payload json.RawMessage `json:"payload"`
		Deleted bool            `json:"deleted"`
	} `json:"items"`
}

// Lookup asks for ids in one request.
func (r *SyncerReader) Lookup(ctx context.Context, ids []string) (map[string]There, error) {
	raw, err := postIDs(ctx, r.Client, "/v1/lookup", cmp.Or(r.Retries, LookupRetriesDefault), r.Sleep, ids)
	if err != nil {
		return nil, err
	}
	var ans lookupAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("lookup answer: %w", err)
	}
	out := make(map[string]There, len(ans.Items))
	for _, it := range ans.Items {
		id := idText(it.ID)
		t := There{Version: it.Version, Deleted: it.Deleted}
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

// ErrNoReadAPI is returned by NewReader for a format the contract gives no
// read API.
var ErrNoReadAPI = errors.New("has no read API")
