package fakethirdparty

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Formats the fake speaks besides syncer's own (Config.Format), as
// docs/protocol.md section  7 says the third party does.
const (
	FormatSyncer           = "syncer"
	FormatStandardWebhooks = "standard-webhooks"
	FormatCloudEvents      = "cloudevents"
	FormatElasticsearch    = "elasticsearch"
	// FormatCustom is a HubSpot-like batch API: POST .../batch/upsert with
	// {"inputs": [{"id", "version", "properties"}]} and .../batch/archive
	// with {"inputs": [{"id", "version"}]}, answered 207 with the items it
	// refused in "errors" ({"message", "context": {"ids": [id]}}), or 200
	// with "status": "COMPLETE" when it refused none.
	FormatCustom = "custom"
)

// Formats lists the values Config.Format accepts.
var Formats = []string{FormatSyncer, FormatStandardWebhooks, FormatCloudEvents, FormatElasticsearch, FormatCustom}

// signatureTolerance is how far a webhook-timestamp may be from the fake's
// clock, as the specification's libraries allow.
const signatureTolerance = 5 * time.Minute

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

// decodeWebhook verifies a Standard Webhooks request's signature with
// Config.SigningSecret and reads its one item.
func decodeWebhook(s *Server, cfg Config, r *http.Request, body []byte) ([]thirdparty.Item, error) {
	if cfg.SigningSecret != "" {
		key, err := standardwebhooks.ParseSecret(cfg.SigningSecret)
		if err != nil {
			return nil, errSignature{errors.New("fake: the signing secret is not whsec_ and base64")}
		}
		id, ts := r.Header.Get("Webhook-Id"), r.Header.Get("Webhook-Timestamp")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if id == "" || err != nil {
			return nil, errSignature{errors.New("webhook-id and webhook-timestamp are required")}
		}
		if d := s.now().Sub(time.Unix(sec, 0)); d > signatureTolerance || d < -signatureTolerance {
			return nil, errSignature{errors.New("webhook-timestamp is too far from now")}
		}
		want := standardwebhooks.Signature(key, id, ts, body)
		ok := false
		for _, sig := range strings.Fields(r.Header.Get("Webhook-Signature")) {
			if sig == want {
				ok = true
			}
		}
		if !ok {
			return nil, errSignature{errors.New("no valid webhook-signature")}
		}
	}
	var m struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
		Data      struct {
			ID      string          `json:"id"`
			Version int64           `json:"version"`
			Payload json.RawMessage `json:"payload"`
			Deleted bool            `json:"deleted"`
		} `json:"data"`
	}
	if err := strictJSON(body, &m); err != nil {
		return nil, err
	}
	if _, err := time.Parse(time.RFC3339, m.Timestamp); err != nil {
		return nil, fmt.Errorf("timestamp %q is not RFC 3339", m.Timestamp)
	}
	if m.Data.Deleted != strings.HasSuffix(m.Type, ".deleted") || (!m.Data.Deleted && !strings.HasSuffix(m.Type, ".upserted")) {
		return nil, fmt.Errorf("type %q does not match the data", m.Type)
	}
	return []thirdparty.Item{{ID: m.Data.ID, Version: m.Data.Version, Payload: m.Data.Payload, Deleted: m.Data.Deleted}}, nil
}

// errSignature is a request whose signature does not verify: 401.
type errSignature struct{ error }

// cloudEvent is the part of a structured CloudEvent the fake reads.
type cloudEvent struct {
	specVersion, id, source, typ, subject, time string
	data                                        []byte // a view into the body; nil when absent
}

// scanCloudEvents reads a JSON array of structured events with the fake's
// own scanner (scan.go): encoding/json took a third of the fake's time in
// the cloudevents drain, on the machine the drain is measured on.
func scanCloudEvents(body []byte) ([]cloudEvent, error) {
	s := &scanner{data: body}
	if err := s.expect('['); err != nil {
		return nil, err
	}
	str := func(to *string) error {
		s.ws()
		if s.peek() != '"' {
			return s.errorf("attributes must be strings")
		}
		raw, escaped, err := s.str()
		if err != nil {
			return err
		}
		if !escaped {
			*to = string(raw)
			return nil
		}
		return json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), to)
	}
	var events []cloudEvent
	err := s.elements(func() error {
		s.ws()
		if s.peek() != '{' {
			return s.errorf("an event must be an object")
		}
		s.pos++
		var e cloudEvent
		err := s.members(func(key []byte, escaped bool) error {
			switch {
			case keyIs(key, escaped, "specversion"):
				return str(&e.specVersion)
			case keyIs(key, escaped, "id"):
				return str(&e.id)
			case keyIs(key, escaped, "source"):
				return str(&e.source)
			case keyIs(key, escaped, "type"):
				return str(&e.typ)
			case keyIs(key, escaped, "subject"):
				return str(&e.subject)
			case keyIs(key, escaped, "time"):
				return str(&e.time)
			case keyIs(key, escaped, "data"):
				raw, err := s.value(2)
				e.data = raw
				return err
			}
			_, err := s.value(2)
			return err
		})
		events = append(events, e)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.ws()
	if s.pos != len(s.data) {
		return nil, s.errorf("data after the batch")
	}
	return events, nil
}

// decodeCloudEvents reads a batch of structured CloudEvents.
func decodeCloudEvents(_ *Server, _ Config, _ *http.Request, body []byte) ([]thirdparty.Item, error) {
	events, err := scanCloudEvents(body)
	if err != nil {
		return nil, err
	}
	items := make([]thirdparty.Item, len(events))
	for i, e := range events {
		if e.specVersion != "1.0" || e.source == "" || e.typ == "" || e.id == "" {
			return nil, fmt.Errorf("event %d: specversion 1.0, id, source and type are required", i)
		}
		if _, err := time.Parse(time.RFC3339, e.time); err != nil {
			return nil, fmt.Errorf("event %d: time %q is not RFC 3339", i, e.time)
		}
		cut := strings.LastIndexByte(e.id, ':')
		if cut < 0 || e.id[:cut] != e.subject {
			return nil, fmt.Errorf("event %d: id %q is not <subject>:<version>", i, e.id)
		}
		v, err := strconv.ParseInt(e.id[cut+1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("event %d: id %q is not <subject>:<version>", i, e.id)
		}
		deleted := strings.HasSuffix(e.typ, ".deleted")
		if !deleted && !strings.HasSuffix(e.typ, ".upserted") {
			return nil, fmt.Errorf("event %d: type %q ends neither in .upserted nor .deleted", i, e.typ)
		}
		items[i] = thirdparty.Item{ID: e.subject, Version: v, Deleted: deleted}
		if !deleted {
			items[i].Payload = e.data
		} else if e.data != nil {
			return nil, fmt.Errorf("event %d: a .deleted event carries data", i)
		}
	}
	return items, nil
}

// decodeBulk reads an Elasticsearch bulk body with external versions.
// Payload lines are not copied: they are views into body, which outlives
// the request's processing.
func decodeBulk(_ *Server, _ Config, r *http.Request, body []byte) ([]thirdparty.Item, error) {
	if !strings.HasSuffix(r.URL.Path, "/_bulk") {
		return nil, errNotFound
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		return nil, errors.New("the bulk request must be terminated by a newline [\\n]")
	}
	items := make([]thirdparty.Item, 0, bytes.Count(body, []byte{'\n'})/2+1)
	next := func() ([]byte, bool) {
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			return nil, false
		}
		line := body[:i]
		body = body[i+1:]
		return line, true
	}
	for {
		line, ok := next()
		if !ok {
			return items, nil
		}
		it, ok := fastAction(line)
		if !ok {
			var err error
			if it, err = slowAction(line, len(items)); err != nil {
				return nil, err
			}
		}
		if !it.Deleted {
			doc, ok := next()
			if !ok {
				return nil, fmt.Errorf("action %d: index without its document", len(items))
			}
			it.Payload = doc
		}
		items = append(items, it)
	}
}

// fastAction reads an action line as syncer writes it, without
// reflection: {"index":{"_id":"42","version":3,"version_type":"external"}}.
// Anything else is left to slowAction.
func fastAction(line []byte) (thirdparty.Item, bool) {
	var it thirdparty.Item
	rest, ok := bytes.CutPrefix(line, []byte(`{"index":{"_id":"`))
	if !ok {
		if rest, ok = bytes.CutPrefix(line, []byte(`{"delete":{"_id":"`)); !ok {
			return it, false
		}
		it.Deleted = true
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return it, false
	}
	it.ID = string(rest[:end])
	rest, ok = bytes.CutPrefix(rest[end+1:], []byte(`,"version":`))
	if !ok {
		return it, false
	}
	digits := 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		digits++
	}
	v, err := strconv.ParseInt(string(rest[:digits]), 10, 64)
	if err != nil || !bytes.Equal(rest[digits:], []byte(`,"version_type":"external"}}`)) {
		return it, false
	}
	it.Version = v
	return it, true
}

// slowAction reads any other action line as JSON.
func slowAction(line []byte, n int) (thirdparty.Item, error) {
	var action map[string]struct {
		ID          *string `json:"_id"`
		Version     int64   `json:"version"`
		VersionType string  `json:"version_type"`
	}
	if err := strictJSON(line, &action); err != nil || len(action) != 1 {
		return thirdparty.Item{}, fmt.Errorf("malformed action/metadata line [%d]", n+1)
	}
	for kind, a := range action {
		if a.ID == nil || a.VersionType != "external" {
			return thirdparty.Item{}, fmt.Errorf("action %d: _id and version_type external are required", n)
		}
		switch kind {
		case "delete":
			return thirdparty.Item{ID: *a.ID, Version: a.Version, Deleted: true}, nil
		case "index":
			return thirdparty.Item{ID: *a.ID, Version: a.Version}, nil
		}
		return thirdparty.Item{}, fmt.Errorf("action %d: unknown action %q", n, kind)
	}
	return thirdparty.Item{}, nil
}

var errNotFound = errors.New("no handler found for uri")

// bulkAnswer is Elasticsearch's bulk answer, an entry per action in
// order, written by hand: the fake shares its machine with the daemon it
// measures.
func bulkAnswer(items []thirdparty.Item, verdicts []itemVerdict, _ Config) (int, []byte) {
	var b bytes.Buffer
	b.Grow(64 + 110*len(items))
	anyError := false
	for _, v := range verdicts {
		anyError = anyError || (v.status != http.StatusOK && v.status != http.StatusCreated && v.status != http.StatusNotFound)
	}
	b.WriteString(`{"took":0,"errors":` + strconv.FormatBool(anyError) + `,"items":[`)
	var num [20]byte
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		v := verdicts[i]
		if it.Deleted {
			b.WriteString(`{"delete":{"_index":"fake","_id":`)
		} else {
			b.WriteString(`{"index":{"_index":"fake","_id":`)
		}
		id, _ := json.Marshal(it.ID) // a string always marshals
		b.Write(id)
		switch v.status {
		case http.StatusOK, http.StatusCreated, http.StatusNotFound:
			b.WriteString(`,"_version":`)
			b.Write(strconv.AppendInt(num[:0], it.Version, 10))
			switch {
			case v.status == http.StatusNotFound:
				b.WriteString(`,"result":"not_found"`)
			case it.Deleted:
				b.WriteString(`,"result":"deleted"`)
			default:
				b.WriteString(`,"result":"created"`)
			}
		default:
			reason, _ := json.Marshal(v.reason)
			b.WriteString(`,"error":{"type":"` + errorType(v.status) + `","reason":`)
			b.Write(reason)
			b.WriteByte('}')
		}
		b.WriteString(`,"status":`)
		b.Write(strconv.AppendInt(num[:0], int64(v.status), 10))
		b.WriteString(`}}`)
	}
	b.WriteString(`]}`)
	return http.StatusOK, b.Bytes()
}

func errorType(status int) string {
	switch status {
	case http.StatusConflict:
		return "version_conflict_engine_exception"
	case http.StatusTooManyRequests:
		return "es_rejected_execution_exception"
	}
	return "mapper_parsing_exception"
}

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
// held, 404 for a delete of nothing, 429 drawn by ItemTooManyRate, 400 for
// RejectField), per item in a 207 for custom, the whole request refused
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
