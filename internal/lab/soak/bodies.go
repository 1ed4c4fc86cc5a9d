package soak

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// sentItems reads the items of a request body in its destination's
// format, for the payloads the checks compare with the database; a body
// it cannot read holds none (the fake refuses it, and counts that).
func sentItems(format, path string, body []byte) []thirdparty.Item {
	switch format {
	case fakethirdparty.FormatElasticsearch:
		return bulkItems(body)
	case fakethirdparty.FormatStandardWebhooks:
		var m struct {
			Data struct {
				ID      string          `json:"id"`
				Version int64           `json:"version"`
				Payload json.RawMessage `json:"payload"`
				Deleted bool            `json:"deleted"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &m) != nil {
			return nil
		}
		return []thirdparty.Item{{ID: m.Data.ID, Version: m.Data.Version, Payload: m.Data.Payload, Deleted: m.Data.Deleted}}
	case fakethirdparty.FormatCustom:
		var in struct {
			Inputs []struct {
				ID         string          `json:"id"`
				Version    int64           `json:"version"`
				Properties json.RawMessage `json:"properties"`
			} `json:"inputs"`
		}
		if json.Unmarshal(body, &in) != nil {
			return nil
		}
		archive := strings.HasSuffix(path, "/batch/archive")
		out := make([]thirdparty.Item, len(in.Inputs))
		for i, x := range in.Inputs {
			out[i] = thirdparty.Item{ID: x.ID, Version: x.Version, Payload: x.Properties, Deleted: archive}
		}
		return out
	}
	var batch struct {
		Items []struct {
			ID      string          `json:"id"`
			Version int64           `json:"version"`
			Payload json.RawMessage `json:"payload"`
			Deleted bool            `json:"deleted"`
		} `json:"items"`
	}
	if json.Unmarshal(body, &batch) != nil {
		return nil
	}
	out := make([]thirdparty.Item, len(batch.Items))
	for i, x := range batch.Items {
		out[i] = thirdparty.Item{ID: x.ID, Version: x.Version, Payload: x.Payload, Deleted: x.Deleted}
	}
	return out
}

// bulkItems reads an Elasticsearch bulk body: an action line, and a
// document line after each index.
func bulkItems(body []byte) []thirdparty.Item {
	var out []thirdparty.Item
	lines := bytes.Split(bytes.TrimSuffix(body, []byte{'\n'}), []byte{'\n'})
	for i := 0; i < len(lines); i++ {
		var action map[string]struct {
			ID      string `json:"_id"`
			Version int64  `json:"version"`
		}
		if json.Unmarshal(lines[i], &action) != nil {
			return out
		}
		if a, ok := action["delete"]; ok {
			out = append(out, thirdparty.Item{ID: a.ID, Version: a.Version, Deleted: true})
			continue
		}
		a, ok := action["index"]
		if !ok || i+1 >= len(lines) {
			return out
		}
		i++
		out = append(out, thirdparty.Item{ID: a.ID, Version: a.Version, Payload: bytes.Clone(lines[i])})
	}
	return out
}
