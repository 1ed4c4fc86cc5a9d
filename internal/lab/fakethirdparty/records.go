package fakethirdparty

import (
	"slices"
	"strconv"
	"time"
)

// Request is one request as the fake saw it.
type Request struct {
	// At is when it arrived.
	At time.Time
	// Status is the answer's status; 0 when the client gave up first.
	Status int
	// Key is its Idempotency-Key.
	Key string
	// Items is how many items its batch held; 0 when it was refused before
	// its body was read.
	Items int
	// Replayed is set when it was answered from the key cache.
	Replayed bool
}

// Delivery is one item accepted.
type Delivery struct {
	ID int64
	// Text is the id when it is not a decimal int64 (a source's text or
	// uuid key); ID is then 0.
	Text    string
	Version int64
	// Deleted is set for a tombstone.
	Deleted bool
	// Key is the Idempotency-Key of the request that delivered it.
	Key string
	// At is when it was accepted.
	At time.Time
}

// Stats counts what the fake received. Field names in JSON are what
// GET /v1/stats returns.
type Stats struct {
	Requests int64 `json:"requests"`
	// RequestsByStatus counts answered requests by status code; "timeout"
	// counts those the client gave up on before an answer.
	RequestsByStatus map[string]int64 `json:"requests_by_status"`
	// ItemsReceived counts items of every batch whose body was read,
	// replays and refused batches included.
	ItemsReceived int64 `json:"items_received"`
	ItemsAccepted int64 `json:"items_accepted"`
	ItemsRejected int64 `json:"items_rejected"`
	// DistinctPairs counts distinct (id, version) accepted.
	DistinctPairs int64 `json:"distinct_pairs"`
	// DuplicatePairs counts acceptances of a pair beyond its first.
	DuplicatePairs int64 `json:"duplicate_pairs"`
	// DuplicatesSameKey counts the duplicate acceptances that came under a
	// key that had already delivered the pair (possible only with
	// IgnoreIdempotencyKey); DuplicatesOtherKey those under a new key.
	DuplicatesSameKey  int64 `json:"duplicates_same_key"`
	DuplicatesOtherKey int64 `json:"duplicates_other_key"`
	// KeyReplays counts requests answered from the key cache.
	KeyReplays int64 `json:"key_replays"`
	// KeyConflicts counts requests reusing a key for different pairs.
	KeyConflicts int64 `json:"key_conflicts"`
	// OutOfOrder counts (id, version) accepted when a higher version of
	// that id was already accepted.
	OutOfOrder int64 `json:"out_of_order"`
	// Tombstones counts tombstone items accepted.
	Tombstones int64 `json:"tombstones"`
	// MaxInFlight is the most batch requests the fake was processing at
	// once, from arrival to answer.
	MaxInFlight int64 `json:"max_in_flight"`
	// OverlappingIDs counts ids that arrived in a batch while another
	// unanswered request held the same id: the contract forbids it, since
	// versions of an id must arrive in order.
	OverlappingIDs int64 `json:"overlapping_ids"`
	// OverQuota counts requests that arrived while Quota was exhausted.
	OverQuota int64 `json:"over_quota"`
	// BadAnswers counts requests answered with a BadAnswer body that
	// accepted nothing.
	BadAnswers int64 `json:"bad_answers"`
	// KeyBodyConflicts counts keys (Idempotency-Key, webhook-id) that came
	// with a body other than their first, in a Config.Format mode: one key,
	// one body, broken.
	KeyBodyConflicts int64 `json:"key_body_conflicts"`
	// VersionConflicts counts elasticsearch items answered 409: a version
	// the fake already held.
	VersionConflicts int64 `json:"version_conflicts"`
	// ItemFails counts the items (or, in standard-webhooks, the requests)
	// answered ItemFailStatus by ItemFailShare.
	ItemFails int64 `json:"item_fails"`
	// MaxRequestsInOneSecond is the most requests received within one
	// calendar second of the clock.
	MaxRequestsInOneSecond int64     `json:"max_requests_in_one_second"`
	FirstRequestAt         time.Time `json:"first_request_at,omitzero"`
	LastRequestAt          time.Time `json:"last_request_at,omitzero"`
}

// delivery is the compact record behind Delivery: the key and time are
// shared by every item of a request, so they live in the request record.
type delivery struct {
	id      idKey
	version int64
	req     int32
	deleted bool
}

type requestRecord struct {
	Request
	acceptedAt time.Time
}

type pairState struct {
	key   string // first key that delivered the pair
	count int32
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.RequestsByStatus = make(map[string]int64, len(s.byStatus))
	for code, n := range s.byStatus {
		st.RequestsByStatus[statusLabel(code)] = n
	}
	return st
}

func statusLabel(code int) string {
	if code == 0 {
		return "timeout"
	}
	return strconv.Itoa(code)
}

// Requests returns every finished request, in the order they finished;
// Stats.Requests also counts those still in flight.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i := range s.requests {
		out[i] = s.requests[i].Request
	}
	return out
}

// Deliveries returns every item accepted, in the order of acceptance.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		rec := &s.requests[d.req]
		out[i] = Delivery{ID: d.id.v, Text: d.id.text, Version: d.version, Deleted: d.deleted, Key: rec.Key, At: rec.acceptedAt}
	}
	return out
}

// Latest returns, for every id accepted, the highest version accepted.
func (s *Server) Latest() map[int64]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]int64, len(s.latest.num))
	for id, v := range s.latest.num {
		out[id] = v
	}
	return out
}

func (s *Server) acceptLocked(p pair, deleted bool, key string, reqIndex int32) {
	s.deliveries = append(s.deliveries, delivery{id: p.id, version: p.version, req: reqIndex, deleted: deleted})
	if deleted {
		s.stats.Tombstones++
	}

	if latest, ok := s.latest.get(p.id); !ok || p.version > latest {
		s.latest.set(p.id, p.version)
	} else if p.version < latest {
		s.stats.OutOfOrder++
	}

	st, seen := s.pairs.get(p)
	if !seen {
		s.pairs.set(p, pairState{key: key, count: 1})
		s.stats.DistinctPairs++
		return
	}
	s.stats.DuplicatePairs++
	st.count++
	s.pairs.set(p, st)
	if key == st.key || slices.Contains(s.pairKeys[p], key) {
		s.stats.DuplicatesSameKey++
		return
	}
	s.stats.DuplicatesOtherKey++
	s.pairKeys[p] = append(s.pairKeys[p], key)
}

func (s *Server) noteArrivalLocked(at time.Time) {
	s.stats.Requests++
	if s.stats.FirstRequestAt.IsZero() {
		s.stats.FirstRequestAt = at
	}
	s.stats.LastRequestAt = at
	if sec := at.Unix(); sec != s.second {
		s.second, s.inSecond = sec, 0
	}
	s.inSecond++
	s.stats.MaxRequestsInOneSecond = max(s.stats.MaxRequestsInOneSecond, s.inSecond)
}

func (s *Server) recordLocked(rec requestRecord) {
	s.requests = append(s.requests, rec)
	s.byStatus[rec.Status]++
}

func (s *Server) record(rec requestRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(rec)
}
