package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// ElasticsearchReader reads a destination of the elasticsearch format:
// POST {URL}/_mget with {"ids": [...]} on the index the URL names. A doc
// found is held at its _version (the external version syncer sent) with
// its _source; found false is absent (Elasticsearch keeps no deleted
// document); a doc with an error is unknown.
type ElasticsearchReader struct {
	// Client sends the requests to the destination's URL, which names the
	// index, with its credentials, headers and TLS. Required.
	Client Sender
	// Retries is how often a transient failure is tried again. Defaults to
	// LookupRetriesDefault.
	Retries int
	// Sleep waits between tries. Defaults to a context-aware sleep.
	Sleep func(ctx context.Context, d time.Duration) error
}

var _ Reader = (*ElasticsearchReader)(nil)

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
func (r *ElasticsearchReader) Lookup(ctx context.Context, ids []string) (map[string]There, error) {
	raw, err := postIDs(ctx, r.Client, "/_mget", cmp.Or(r.Retries, LookupRetriesDefault), r.Sleep, ids)
	if err != nil {
		return nil, err
	}
	var ans mgetAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("_mget answer: %w", err)
	}
	out := make(map[string]There, len(ans.Docs))
	for _, d := range ans.Docs {
		switch {
		case len(d.Error) > 0 && string(d.Error) != "null":
			out[d.ID] = There{Unknown: true}
		case d.Found:
			out[d.ID] = There{Version: d.Version, Payload: d.Source}
		}
	}
	return out, nil
}
