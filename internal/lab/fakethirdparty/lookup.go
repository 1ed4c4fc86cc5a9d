package fakethirdparty

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// holding is what the fake holds for one id, as GET /v1/lookup answers it:
// the latest item accepted, or what a drift knob made of it.
type holding struct {
	version int64
	payload []byte // nil for a deleted id
	deleted bool
	unknown bool // answered with an error instead of what is held
}

// store is what Config.Lookup keeps: the latest accepted item of every id
// of syncer's own format, and the times lookups arrived.
type store struct {
	byID    map[idKey]holding
	lookups []time.Time
}

func newStore() *store { return &store{byID: map[idKey]holding{}} }

// keepLocked records an accepted item when Config.Lookup is set.
func (s *Server) keepLocked(it *wireItem) {
	if !s.cfg.Lookup {
		return
	}
	k := it.ID.key()
	if h, ok := s.store.byID[k]; ok && h.version > it.Version {
		return
	}
	h := holding{version: it.Version, deleted: it.Deleted}
	if !it.Deleted {
		h.payload = slices.Clone(it.Payload.raw)
	}
	s.store.byID[k] = h
}

// keepItemLocked records an accepted item of a format when Config.Lookup
// is set (elasticsearch's _mget reads them).
func (s *Server) keepItemLocked(k idKey, it thirdparty.Item) {
	if !s.cfg.Lookup {
		return
	}
	if h, ok := s.store.byID[k]; ok && h.version > it.Version {
		return
	}
	h := holding{version: it.Version, deleted: it.Deleted}
	if !it.Deleted {
		h.payload = slices.Clone([]byte(it.Payload))
	}
	s.store.byID[k] = h
}

// keyOf is the map key of an id in its text form, as the decoder makes it.
func keyOf(id string) idKey {
	if v, err := strconv.ParseInt(id, 10, 64); err == nil && strconv.FormatInt(v, 10) == id {
		return idKey{v: v}
	}
	return idKey{text: id}
}

// Drift changes what the fake holds as a third party's own users and
// imports would, for `syncer verify` to find: each field names ids (in
// their text form).
type Drift struct {
	// Lose forgets the ids, as a migration that lost rows.
	Lose []string `json:"lose,omitempty"`
	// Edit replaces the payloads, as a person editing in the UI; an id
	// not held is created.
	Edit map[string]json.RawMessage `json:"edit,omitempty"`
	// Recreate holds the ids again, live, with these payloads, as an
	// import from an old snapshot bringing back deleted rows.
	Recreate map[string]json.RawMessage `json:"recreate,omitempty"`
	// Unknown makes lookups answer an error for the ids instead of what
	// is held.
	Unknown []string `json:"unknown,omitempty"`
}

// ApplyDrift changes what the fake holds (see Drift).
func (s *Server) ApplyDrift(d Drift) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range d.Lose {
		delete(s.store.byID, keyOf(id))
	}
	for id, p := range d.Edit {
		h := s.store.byID[keyOf(id)]
		h.payload, h.deleted = slices.Clone([]byte(p)), false
		s.store.byID[keyOf(id)] = h
	}
	for id, p := range d.Recreate {
		h := s.store.byID[keyOf(id)]
		h.payload, h.deleted = slices.Clone([]byte(p)), false
		s.store.byID[keyOf(id)] = h
	}
	for _, id := range d.Unknown {
		h := s.store.byID[keyOf(id)]
		h.unknown = true
		s.store.byID[keyOf(id)] = h
	}
}

// Lookups returns when each lookup arrived, answered or not.
func (s *Server) Lookups() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.store.lookups)
}

type lookupItem struct {
	ID      string          `json:"id"`
	Version int64           `json:"version,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Deleted bool            `json:"deleted,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// handleLookup answers POST /v1/lookup {"ids": [...]} from what the fake
// holds: an item per id held, none for an id not held. It passes the same
// outage, token and rate limit as batches (one limiter for both), so a
// test sees verify and export share the third party's rate.
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	on := s.cfg.Lookup
	s.mu.Unlock()
	if !on {
		writeJSON(w, http.StatusNotFound, errorBody("lookup is off: start the fake with Lookup (--lookup)"))
		return
	}
	var req struct {
		IDs []string `json:"ids"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody("body must be {\"ids\": [...]}: "+err.Error()))
		return
	}
	if status := s.admitRead(r); status != http.StatusOK {
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, errorBody(http.StatusText(status)))
		return
	}
	s.mu.Lock()
	items := make([]lookupItem, 0, len(req.IDs))
	for _, id := range req.IDs {
		h, ok := s.store.byID[keyOf(id)]
		switch {
		case !ok:
		case h.unknown:
			items = append(items, lookupItem{ID: id, Error: "not available"})
		case h.deleted:
			items = append(items, lookupItem{ID: id, Version: h.version, Deleted: true})
		default:
			items = append(items, lookupItem{ID: id, Version: h.version, Payload: s.echoedLocked(h.payload, r)})
		}
	}
	s.mu.Unlock()
	b, err := json.Marshal(struct {
		Items []lookupItem `json:"items"`
	}{items})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// admitRead counts a read (lookup or _mget) and passes it through the
// outage, token and rate limit batches pass (one limiter for both), and
// returns the status to answer: 200 when it may be served.
func (s *Server) admitRead(r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.noteArrivalLocked(now)
	s.store.lookups = append(s.store.lookups, now)
	status := http.StatusOK
	switch {
	case now.Before(s.outageUntil):
		status = http.StatusServiceUnavailable
	case s.cfg.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.Token:
		status = http.StatusUnauthorized
	case s.limiter != nil && !s.limiter.AllowN(now, 1):
		status = http.StatusTooManyRequests
	}
	s.byStatus[status]++
	return status
}

// handleDrift serves POST /v1/admin/drift with a Drift as its body.
func (s *Server) handleDrift(w http.ResponseWriter, r *http.Request) {
	var d Drift
	if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody("body must be a drift: "+err.Error()))
		return
	}
	s.ApplyDrift(d)
	w.WriteHeader(http.StatusNoContent)
}
