package fakethirdparty

import (
	"encoding/json"
	"net/http"
)

type mgetDoc struct {
	Index   string          `json:"_index"`
	ID      string          `json:"_id"`
	Version int64           `json:"_version,omitempty"`
	Found   bool            `json:"found"`
	Source  json.RawMessage `json:"_source,omitempty"`
	Error   *struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	} `json:"error,omitempty"`
}

// handleMget answers POST /{index}/_mget {"ids": [...]} as Elasticsearch
// does, from what the fake holds (Config.Lookup): found with _version (the
// external version) and _source, found false for an id not held or
// deleted (Elasticsearch keeps no deleted document), an error entry for an
// id Drift made unknown. It passes the same outage, token and rate limit
// as batches.
func (s *Server) handleMget(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	on := s.cfg.Lookup && s.dialect != nil && s.dialect.name == FormatElasticsearch
	s.mu.Unlock()
	if !on {
		writeJSON(w, http.StatusNotFound, errorBody("_mget is off: start the fake with Format elasticsearch and Lookup"))
		return
	}
	var req struct {
		IDs []string `json:"ids"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(`body must be {"ids": [...]}: `+err.Error()))
		return
	}
	if status := s.admitRead(r); status != http.StatusOK {
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, errorBody(http.StatusText(status)))
		return
	}
	index := r.PathValue("index")
	docs := make([]mgetDoc, 0, len(req.IDs))
	s.mu.Lock()
	for _, id := range req.IDs {
		d := mgetDoc{Index: index, ID: id}
		h, ok := s.store.byID[keyOf(id)]
		switch {
		case ok && h.unknown:
			d.Error = &struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			}{"no_shard_available_action_exception", "No shard available"}
		case ok && !h.deleted:
			d.Found, d.Version, d.Source = true, h.version, h.payload
		}
		docs = append(docs, d)
	}
	s.mu.Unlock()
	b, err := json.Marshal(struct {
		Docs []mgetDoc `json:"docs"`
	}{docs})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, b)
}
