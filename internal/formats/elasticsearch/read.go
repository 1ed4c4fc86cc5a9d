package elasticsearch

import (
	"encoding/json"
	"fmt"

	"github.com/syncer-dev/syncer/internal/formats/readback"
)

// ReadBack are the elasticsearch format's verify settings: its read API,
// POST {URL}/_mget with {"ids": [...]} on the index the URL names. A doc
// found is held at its _version (the external version syncer sent) with
// its _source; found false is absent (Elasticsearch keeps no deleted
// document); a doc with an error is unknown.
var ReadBack = readback.IDs{Path: "/_mget", Answer: readMget}

type mgetAnswer struct {
	Docs []struct {
		ID      string          `json:"_id"`
		Version int64           `json:"_version"`
		Found   bool            `json:"found"`
		Source  json.RawMessage `json:"_source"`
		Error   json.RawMessage `json:"error"`
	} `json:"docs"`
}

// readMget reads an _mget answer.
func readMget(raw []byte) (map[string]readback.There, error) {
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
