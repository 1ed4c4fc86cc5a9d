package fakethirdparty

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// decodeInputs reads the HubSpot-like {"inputs": [...]}.
func decodeInputs(_ *Server, _ Config, r *http.Request, body []byte) ([]thirdparty.Item, error) {
	archive := strings.HasSuffix(r.URL.Path, "/batch/archive")
	if !archive && !strings.HasSuffix(r.URL.Path, "/batch/upsert") {
		return nil, errNotFound
	}
	var in struct {
		Inputs []struct {
			ID         string          `json:"id"`
			Version    int64           `json:"version"`
			Properties json.RawMessage `json:"properties"`
		} `json:"inputs"`
	}
	if err := strictJSON(body, &in); err != nil {
		return nil, err
	}
	items := make([]thirdparty.Item, len(in.Inputs))
	for i, x := range in.Inputs {
		items[i] = thirdparty.Item{ID: x.ID, Version: x.Version, Deleted: archive}
		if !archive {
			items[i].Payload = x.Properties
		}
	}
	return items, nil
}

// inputsAnswer is the HubSpot-like answer: 207 with errors, or 200.
func inputsAnswer(items []thirdparty.Item, verdicts []itemVerdict, _ Config) (int, []byte) {
	type ctx struct {
		IDs []string `json:"ids"`
	}
	type failure struct {
		Status   string `json:"status"`
		Category string `json:"category"`
		Message  string `json:"message"`
		Context  ctx    `json:"context"`
	}
	out := struct {
		Status  string           `json:"status"`
		Results []map[string]any `json:"results"`
		Errors  []failure        `json:"errors,omitempty"`
	}{Status: "COMPLETE", Results: []map[string]any{}}
	for i, it := range items {
		if verdicts[i].status >= 300 {
			out.Errors = append(out.Errors, failure{Status: "error", Category: "VALIDATION_ERROR", Message: verdicts[i].reason, Context: ctx{IDs: []string{it.ID}}})
			continue
		}
		out.Results = append(out.Results, map[string]any{"id": it.ID})
	}
	b, _ := json.Marshal(out)
	if len(out.Errors) > 0 {
		return http.StatusMultiStatus, b
	}
	return http.StatusOK, b
}
