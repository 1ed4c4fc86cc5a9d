package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// The receivers below answer as HubSpot's and Meilisearch's APIs do, for
// the paths the recipes of docs/destinations.md use: what they take in a
// write, they hold, and they answer a read from it.

// hubspotAPI is HubSpot's contacts batch API: upsert by email, archive,
// and batch read with idProperty (at most 100 inputs a call). It keeps
// every property as a string, as HubSpot does, and adds its own.
type hubspotAPI struct {
	token string
	mu    sync.Mutex
	next  int
	byKey map[string]map[string]any // by email
	// refused counts requests refused for their size.
	refused int
}

func newHubspotAPI(token string) *hubspotAPI {
	return &hubspotAPI{token: token, byKey: map[string]map[string]any{}}
}

type hubspotInputs struct {
	IDProperty string   `json:"idProperty"`
	Properties []string `json:"properties"`
	Inputs     []struct {
		ID         string         `json:"id"`
		IDProperty string         `json:"idProperty"`
		Properties map[string]any `json:"properties"`
	} `json:"inputs"`
}

func (h *hubspotAPI) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byKey)
}

// set changes what HubSpot holds, as a person in its UI or an import does:
// nil forgets the contact.
func (h *hubspotAPI) set(email string, props map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if props == nil {
		delete(h.byKey, email)
		return
	}
	for k, v := range props {
		h.byKey[email][k] = v
	}
}

func (h *hubspotAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+h.token {
		writeJSONAnswer(w, http.StatusUnauthorized, map[string]any{"status": "error", "category": "INVALID_AUTHENTICATION", "message": "Authentication credentials not found."})
		return
	}
	var in hubspotInputs
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Inputs) > 100 {
		h.mu.Lock()
		h.refused++
		h.mu.Unlock()
		writeJSONAnswer(w, http.StatusBadRequest, map[string]any{"status": "error", "category": "VALIDATION_ERROR", "message": "Invalid input JSON or more than 100 inputs"})
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.URL.Path {
	case "/crm/v3/objects/contacts/batch/upsert":
		var results []any
		for _, it := range in.Inputs {
			if it.IDProperty != "email" {
				writeJSONAnswer(w, http.StatusBadRequest, map[string]any{"status": "error", "category": "VALIDATION_ERROR", "message": "idProperty must be a unique property"})
				return
			}
			c, ok := h.byKey[it.ID]
			if !ok {
				h.next++
				c = map[string]any{"hs_object_id": fmt.Sprint(h.next), "createdate": "2026-11-28T10:00:00.000Z"}
				h.byKey[it.ID] = c
			}
			for k, v := range it.Properties {
				c[k] = fmt.Sprint(v)
			}
			c["lastmodifieddate"] = "2026-11-28T10:00:00.000Z"
			results = append(results, map[string]any{"id": c["hs_object_id"], "properties": c})
		}
		writeJSONAnswer(w, http.StatusOK, map[string]any{"status": "COMPLETE", "results": results})
	case "/crm/v3/objects/contacts/batch/archive":
		for _, it := range in.Inputs {
			delete(h.byKey, it.ID)
		}
		w.WriteHeader(http.StatusNoContent)
	case "/crm/v3/objects/contacts/batch/read":
		results, missing := []any{}, []string{}
		for _, it := range in.Inputs {
			c, ok := h.byKey[it.ID]
			if in.IDProperty != "email" || !ok {
				missing = append(missing, it.ID)
				continue
			}
			props := map[string]any{"hs_object_id": c["hs_object_id"], "createdate": c["createdate"], "lastmodifieddate": c["lastmodifieddate"]}
			for _, p := range in.Properties {
				props[p] = c[p] // null when not set
			}
			results = append(results, map[string]any{"id": c["hs_object_id"], "properties": props, "archived": false})
		}
		ans := map[string]any{"status": "COMPLETE", "results": results, "startedAt": "2026-11-28T10:00:00.000Z", "completedAt": "2026-11-28T10:00:00.100Z"}
		status := http.StatusOK
		if len(missing) > 0 {
			status = http.StatusMultiStatus
			ans["numErrors"] = 1
			ans["errors"] = []any{map[string]any{"status": "error", "category": "OBJECT_NOT_FOUND",
				"message": "Could not get some CONTACT objects, they may be deleted or not exist. Check that ids are valid.",
				"context": map[string]any{"ids": missing}}}
		}
		writeJSONAnswer(w, status, ans)
	default:
		writeJSONAnswer(w, http.StatusNotFound, map[string]any{"status": "error", "message": "not found"})
	}
}

// meiliAPI is a Meilisearch index, products: documents added or replaced,
// deleted by batch, and fetched with a filter on id (which must be among
// its filterable attributes), 20 at most unless limit says otherwise.
type meiliAPI struct {
	key     string
	mu      sync.Mutex
	docs    map[string]map[string]any // by id as text
	fetches int
}

func newMeiliAPI(key string) *meiliAPI { return &meiliAPI{key: key, docs: map[string]map[string]any{}} }

func (m *meiliAPI) held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.docs)
}

// set replaces a document, or forgets it with nil.
func (m *meiliAPI) set(id string, doc map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if doc == nil {
		delete(m.docs, id)
		return
	}
	m.docs[id] = doc
}

func (m *meiliAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+m.key {
		writeJSONAnswer(w, http.StatusUnauthorized, map[string]any{"message": "The provided API key is invalid.", "code": "invalid_api_key", "type": "auth"})
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	task := map[string]any{"taskUid": 1, "indexUid": "products", "status": "enqueued", "enqueuedAt": "2026-11-28T10:00:00Z"}
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	switch r.URL.Path {
	case "/indexes/products/documents":
		var docs []map[string]any
		if err := dec.Decode(&docs); err != nil {
			writeJSONAnswer(w, http.StatusBadRequest, map[string]any{"message": err.Error(), "code": "malformed_payload"})
			return
		}
		for _, d := range docs {
			m.docs[fmt.Sprint(d["id"])] = d
		}
		task["type"] = "documentAdditionOrUpdate"
		writeJSONAnswer(w, http.StatusAccepted, task)
	case "/indexes/products/documents/delete-batch":
		var ids []any
		if err := dec.Decode(&ids); err != nil {
			writeJSONAnswer(w, http.StatusBadRequest, map[string]any{"message": err.Error(), "code": "malformed_payload"})
			return
		}
		for _, id := range ids {
			delete(m.docs, fmt.Sprint(id))
		}
		task["type"] = "documentDeletion"
		writeJSONAnswer(w, http.StatusAccepted, task)
	case "/indexes/products/documents/fetch":
		m.fetches++
		var in struct {
			Filter string `json:"filter"`
			Limit  *int   `json:"limit"`
		}
		var ids []any
		err := dec.Decode(&in)
		if inner, ok := strings.CutPrefix(in.Filter, "id IN ["); err == nil && ok && strings.HasSuffix(inner, "]") {
			err = json.Unmarshal([]byte("["+inner), &ids)
		} else if err == nil {
			err = fmt.Errorf("unsupported filter %q", in.Filter)
		}
		if err != nil {
			writeJSONAnswer(w, http.StatusBadRequest, map[string]any{"message": err.Error(), "code": "invalid_document_filter"})
			return
		}
		limit := 20
		if in.Limit != nil {
			limit = *in.Limit
		}
		var keys []string
		for _, id := range ids {
			if _, ok := m.docs[fmt.Sprint(id)]; ok {
				keys = append(keys, fmt.Sprint(id))
			}
		}
		slices.Sort(keys)
		results := []any{}
		for _, k := range keys[:min(limit, len(keys))] {
			results = append(results, m.docs[k])
		}
		writeJSONAnswer(w, http.StatusOK, map[string]any{"results": results, "offset": 0, "limit": limit, "total": len(keys)})
	default:
		writeJSONAnswer(w, http.StatusNotFound, map[string]any{"message": "not found", "code": "index_not_found"})
	}
}

func writeJSONAnswer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
