package elasticsearch

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/syncer-dev/syncer/internal/formats/readback"
)

// ReadSettings are the elasticsearch format's verify settings: its read
// API (_mget) takes none.
type ReadSettings struct{}

// Reader returns the reader of a's account.
func (ReadSettings) Reader(a *readback.Account) (readback.Reader, error) {
	return &Reader{Client: a.Client}, nil
}

// Reader reads a destination of the elasticsearch format:
// POST {URL}/_mget with {"ids": [...]} on the index the URL names. A doc
// found is held at its _version (the external version syncer sent) with
// its _source; found false is absent (Elasticsearch keeps no deleted
// document); a doc with an error is unknown.
type Reader struct {
	// Client sends the requests to the destination's URL, which names the
	// index, with its credentials, headers and TLS. Required.
	Client readback.Sender
	// Tries says how a transient failure is tried again.
	readback.Tries
}

var _ readback.Reader = (*Reader)(nil)

type mgetAnswer struct {
	Docs []struct {
		ID      string          `json:"_id"`
		Version int64           `json:"_version"`
		Found   bool            `json:"found"`
		Source  json.RawMessage `json:"_source"`
		Error   json.RawMessage `json:"error"`
	} `json:"docs"`
}

// Lookup asks for ids in one _mget.
func (r *Reader) Lookup(ctx context.Context, ids []string) (map[string]readback.There, error) {
	raw, err := r.PostIDs(ctx, r.Client, "/_mget", ids)
	if err != nil {
		return nil, err
	}
	var ans mgetAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("_mget answer: %w", err)
	}
	out := make(map[string]readback.There, len(ans.Docs))
	for _, d := range ans.Docs {
		switch {
		case len(d.Error) > 0 && string(d.Error) != "null":
			out[d.ID] = readback.There{Unknown: true}
		case d.Found:
			out[d.ID] = readback.There{Version: d.Version, Payload: d.Source}
		}
	}
	return out, nil
}

// Scrubber removes the destination's secrets from a text (an example of
// what it holds); nil when its client knows none.
func (r *Reader) Scrubber() func(string) string { return readback.ScrubberOf(r.Client) }
