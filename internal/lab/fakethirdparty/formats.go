package fakethirdparty

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/syncer-dev/syncer/internal/formats/cloudevents"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/elasticsearch"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Formats the fake speaks besides syncer's own (Config.Format), as
// docs/protocol.md section  7 says the third party does. Their names are
// the formats' own (each format's package names itself once); what the
// fake answers in each is its own knowledge, server side.
const (
	FormatSyncer           = syncer.Name
	FormatStandardWebhooks = standardwebhooks.Name
	FormatCloudEvents      = cloudevents.Name
	FormatElasticsearch    = elasticsearch.Name
	// FormatCustom is a HubSpot-like batch API: POST .../batch/upsert with
	// {"inputs": [{"id", "version", "properties"}]} and .../batch/archive
	// with {"inputs": [{"id", "version"}]}, answered 207 with the items it
	// refused in "errors" ({"message", "context": {"ids": [id]}}), or 200
	// with "status": "COMPLETE" when it refused none.
	FormatCustom = custom.Name
)

// Formats lists the values Config.Format accepts.
var Formats = []string{FormatSyncer, FormatStandardWebhooks, FormatCloudEvents, FormatElasticsearch, FormatCustom}

// dialect is how one format's requests are read and answered; the checks,
// the records and the stats are the Server's, shared by every format.
type dialect struct {
	name        string
	contentType string
	methods     []string
	// decode turns a request into the canonical batch (section 2), so
	// every format is validated and counted by the same code.
	decode func(s *Server, cfg Config, r *http.Request, body []byte) ([]thirdparty.Item, error)
	// keyOf is the request's idempotency key as the format has one.
	keyOf func(r *http.Request) string
	// honoursKey replays a 2xx answer to a key already answered.
	honoursKey bool
	// wholeRefusal refuses a request holding a rejected item as a whole
	// (400), accepting none of it.
	wholeRefusal bool
	// answer writes the answer of a processed request: verdicts per item.
	answer func(items []thirdparty.Item, verdicts []itemVerdict, cfg Config) (int, []byte)
}

// itemVerdict is what the fake made of one item.
type itemVerdict struct {
	status int // the item's own status: 200, 201, 400, 404, 409, 429
	reason string
}

func (s *Server) dialectOf(name string) *dialect {
	switch name {
	case FormatStandardWebhooks:
		return &dialect{name: name, contentType: "application/json", methods: []string{http.MethodPost},
			decode: decodeWebhook, keyOf: func(r *http.Request) string { return r.Header.Get("Webhook-Id") },
			honoursKey: true, wholeRefusal: true,
			answer: func([]thirdparty.Item, []itemVerdict, Config) (int, []byte) { return http.StatusNoContent, nil }}
	case FormatCloudEvents:
		return &dialect{name: name, contentType: "application/cloudevents-batch+json", methods: []string{http.MethodPost},
			decode: decodeCloudEvents, keyOf: idempotencyKey, honoursKey: true, wholeRefusal: true,
			answer: func([]thirdparty.Item, []itemVerdict, Config) (int, []byte) { return http.StatusAccepted, nil }}
	case FormatElasticsearch:
		return &dialect{name: name, contentType: "application/x-ndjson", methods: []string{http.MethodPost},
			decode: decodeBulk, keyOf: idempotencyKey, answer: bulkAnswer}
	case FormatCustom:
		return &dialect{name: name, contentType: "application/json", methods: []string{http.MethodPost},
			decode: decodeInputs, keyOf: idempotencyKey, honoursKey: true, answer: inputsAnswer}
	}
	return nil
}

func idempotencyKey(r *http.Request) string { return r.Header.Get("Idempotency-Key") }

// bodyConflictLocked counts a key sent with a body other than the first
// one it came with: the client broke one key, one body.
func (s *Server) bodyConflictLocked(key string, body []byte) {
	if key == "" {
		return
	}
	sum := sha256.Sum256(body)
	if prev, ok := s.keyBodies[key]; ok {
		if prev != sum {
			s.stats.KeyBodyConflicts++
		}
		return
	}
	s.keyBodies[key] = sum
}

var errNotFound = errors.New("no handler found for uri")

// strictJSON decodes one JSON value, refusing trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body is not valid JSON: %w", err)
	}
	if dec.More() {
		return errors.New("body has data after its JSON value")
	}
	return nil
}

// processFormat applies a format's batch under the lock and returns the
// answer: per item for elasticsearch (external versions: 409 for a version
// held, 404 for a delete of nothing, 429 drawn by ItemTooManyRate,
// ItemFailStatus for the ids of ItemFailShare, 400 for RejectField), per item in a 207 for custom, the whole request refused
// (400) for formats that refuse as a whole.
func (s *Server) processFormat(cfg Config, rec *requestRecord, d *dialect, batch *wireBatch, items []thirdparty.Item, body []byte, fp uint64, poisoned bool, rejected []int) (int, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.ItemsReceived += int64(len(batch.Items))
	s.bodyConflictLocked(rec.Key, body)
	if d.honoursKey {
		if ans, ok := s.answers[rec.Key]; ok && rec.Key != "" {
			if ans.fingerprint != fp {
				s.stats.KeyConflicts++
				rec.Status = http.StatusUnprocessableEntity
				s.recordLocked(*rec)
				return rec.Status, errorBody("key was already used for other items")
			}
			s.stats.KeyReplays++
			rec.Status, rec.Replayed = ans.status, true
			s.recordLocked(*rec)
			return ans.status, ans.body
		}
	}
	if cfg.MaxBatchItems > 0 && len(batch.Items) > cfg.MaxBatchItems {
		rec.Status = http.StatusRequestEntityTooLarge
		s.recordLocked(*rec)
		return rec.Status, errorBody(fmt.Sprintf("batch holds %d items, at most %d allowed", len(batch.Items), cfg.MaxBatchItems))
	}
	if d.name == FormatStandardWebhooks && len(items) == 1 && ItemFails(items[0].ID, cfg.ItemFailShare) {
		// One item a request: the item's answer is the request's, and a
		// transient one is not remembered for the key.
		v := itemFailVerdict(cfg)
		s.stats.ItemFails++
		rec.Status = v.status
		s.recordLocked(*rec)
		return rec.Status, errorBody(v.reason)
	}
	msg := fmt.Sprintf("field %s is not allowed", cfg.RejectField)
	if poisoned || (d.wholeRefusal && len(rejected) > 0) {
		rec.Status = http.StatusBadRequest
		s.recordLocked(*rec)
		if poisoned {
			msg = fmt.Sprintf("batch holds an item with field %s", cfg.PoisonField)
		}
		return rec.Status, errorBody(msg)
	}
	verdicts := make([]itemVerdict, len(items))
	for _, i := range rejected {
		verdicts[i] = itemVerdict{status: http.StatusBadRequest, reason: msg}
	}
	rec.Status = http.StatusOK
	rec.acceptedAt = s.now()
	reqIndex := int32(len(s.requests))
	accepted, refused := 0, len(rejected)
	for i := range batch.Items {
		if verdicts[i].status != 0 {
			continue
		}
		it := &batch.Items[i]
		id := it.ID.key()
		if d.name == FormatElasticsearch {
			if ItemFails(items[i].ID, cfg.ItemFailShare) {
				s.stats.ItemFails++
				verdicts[i] = itemFailVerdict(cfg)
				continue
			}
			if cfg.ItemTooManyRate > 0 && s.rng.Float64() < cfg.ItemTooManyRate {
				verdicts[i] = itemVerdict{status: http.StatusTooManyRequests, reason: "rejected execution of coordinating operation"}
				continue
			}
			if latest, ok := s.latest.get(id); ok && latest >= it.Version {
				s.stats.VersionConflicts++
				verdicts[i] = itemVerdict{status: http.StatusConflict,
					reason: fmt.Sprintf("[%s]: version conflict, current version [%d] is higher or equal to the one provided [%d]", it.ID, latest, it.Version)}
				continue
			}
			if it.Deleted && !s.docs[id] {
				verdicts[i] = itemVerdict{status: http.StatusNotFound}
			}
		}
		if verdicts[i].status == 0 {
			verdicts[i].status = http.StatusCreated
		}
		s.docs[id] = !it.Deleted
		s.keepItemLocked(id, items[i])
		s.acceptLocked(pair{id: id, version: it.Version}, it.Deleted, rec.Key, reqIndex)
		accepted++
	}
	s.stats.ItemsAccepted += int64(accepted)
	s.stats.ItemsRejected += int64(refused)
	status, out := d.answer(items, verdicts, cfg)
	rec.Status = status
	s.recordLocked(*rec)
	if d.honoursKey && rec.Key != "" {
		s.answers[rec.Key] = cachedAnswer{status: status, body: out, fingerprint: fp}
	}
	return status, out
}
