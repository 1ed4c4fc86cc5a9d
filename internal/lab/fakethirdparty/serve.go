package fakethirdparty

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) { s.serve(w, r, nil) }

// handleFormat serves a request of Config.Format's dialect.
func (s *Server) handleFormat(w http.ResponseWriter, r *http.Request) { s.serve(w, r, s.dialect) }

// serve serves one request: of syncer's protocol when d is nil, else of
// d's format, read into the same batch, checked, counted and recorded by
// the same code.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, d *dialect) {
	key := r.Header.Get("Idempotency-Key")
	if d != nil {
		key = d.keyOf(r)
	}

	s.mu.Lock()
	arrival := s.now()
	s.noteArrivalLocked(arrival)
	s.inFlight++
	s.stats.MaxInFlight = max(s.stats.MaxInFlight, s.inFlight)
	cfg := s.cfg
	s.mu.Unlock()
	// Deferred first, so it runs last: a request is in flight until its
	// answer is written or it is abandoned (abandon panics through here).
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	rec := requestRecord{Request: Request{At: arrival, Key: key}}

	// The body is read first, whatever the answer will be: the server only
	// notices a client that gives up (r.Context) once the body is consumed,
	// and an unread body would cost the client its keep-alive connection.
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 4<<20 {
			bodyPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes)); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.refuse(w, &rec, http.StatusRequestEntityTooLarge, "body too large")
			return
		}
		s.abandon(rec) // the client went away mid-body; does not return
	}

	// Decoded now, though a bad body is refused only after the checks a
	// real API makes first, so that its ids count as held from arrival to
	// answer (Stats.OverlappingIDs), Latency included.
	var batch *wireBatch
	var decodeErr error
	var formatItems []thirdparty.Item
	if d == nil {
		batch, decodeErr = decodeBatch(buf.Bytes())
	} else if formatItems, decodeErr = d.decode(s, cfg, r, buf.Bytes()); decodeErr == nil {
		if len(formatItems) == 0 {
			decodeErr = errors.New("the request holds no item")
		} else {
			batch, decodeErr = decodeBatch(thirdparty.AppendBatch(nil, formatItems))
		}
	}
	if decodeErr == nil {
		defer batch.release()
		s.hold(batch)
		defer s.unhold(batch)
	}

	if cfg.Latency > 0 && !s.wait(r, cfg.Latency) {
		s.abandon(rec) // does not return
	}

	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.refuse(w, &rec, http.StatusMethodNotAllowed, "method must be POST")
		return
	}
	if d != nil {
		var sigErr errSignature
		switch {
		case errors.As(decodeErr, &sigErr) && cfg.SignatureStatus == http.StatusBadRequest:
			rec.Status = http.StatusBadRequest
			s.record(rec)
			http.Error(w, "No matching signature found", http.StatusBadRequest)
			return
		case errors.As(decodeErr, &sigErr):
			s.refuse(w, &rec, http.StatusUnauthorized, sigErr.Error())
			return
		case errors.Is(decodeErr, errNotFound):
			s.refuse(w, &rec, http.StatusNotFound, decodeErr.Error())
			return
		}
	}

	s.mu.Lock()
	now := s.now()
	v := s.checkLocked(cfg, r, now)
	s.mu.Unlock()
	if v.quota != nil && v.kind != answerRedirect && v.kind != answerBare {
		setQuota(w.Header(), cfg, now, v.quota)
	}

	switch v.kind {
	case answerRedirect:
		w.Header().Set("Location", cmp.Or(cfg.RedirectLocation, RedirectLocationDefault))
		s.refuse(w, &rec, cfg.Redirect, "moved")
		return
	case answerOutage:
		s.setRetryAfter(w, cfg, now, v.wait)
		s.refuse(w, &rec, http.StatusServiceUnavailable, "outage")
		return
	case answerAuth:
		s.refuse(w, &rec, http.StatusUnauthorized, "missing or wrong bearer token")
		return
	case answerBare:
		rec.Status = http.StatusTooManyRequests
		s.record(rec)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	case answerOverQuota:
		s.refuse(w, &rec, http.StatusTooManyRequests, "quota exhausted")
		return
	case answerRateLimited:
		wait := v.wait
		if cfg.RetryAfter > 0 {
			wait = cfg.RetryAfter
		}
		s.setRetryAfter(w, cfg, now, wait)
		s.refuse(w, &rec, http.StatusTooManyRequests, "rate limit exceeded")
		return
	case answerFailure:
		s.refuse(w, &rec, cmp.Or(cfg.FailureStatus, FailureStatusDefault), "injected failure")
		return
	case answerHang:
		s.wait(r, 0)
		s.abandon(rec) // does not return
	}

	contentType := "application/json"
	if d != nil {
		contentType = d.contentType
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != contentType {
		s.refuse(w, &rec, http.StatusUnsupportedMediaType, "Content-Type must be "+contentType)
		return
	}
	if key == "" && !cfg.IgnoreIdempotencyKey && (d == nil || d.honoursKey) {
		s.refuse(w, &rec, http.StatusBadRequest, "Idempotency-Key header is required")
		return
	}
	if decodeErr != nil {
		s.refuse(w, &rec, http.StatusBadRequest, decodeErr.Error())
		return
	}
	rec.Items = len(batch.Items)
	if cfg.BadAnswer != "" && !slices.Contains(BadAnswers, cfg.BadAnswer) {
		s.refuse(w, &rec, http.StatusInternalServerError, "fake: unknown BadAnswer "+strconv.Quote(cfg.BadAnswer))
		return
	}

	// Everything that reads payloads happens here, outside the lock.
	var poisoned bool
	var rejected []int // indexes into batch.Items
	if cfg.PoisonField != "" || cfg.RejectField != "" {
		for i := range batch.Items {
			p := batch.Items[i].Payload.raw
			if hasTopLevelKey(p, cfg.PoisonField) {
				poisoned = true
				break
			}
			if hasTopLevelKey(p, cfg.RejectField) {
				rejected = append(rejected, i)
			}
		}
	}
	if cfg.BadAnswer == BadAnswerEmpty {
		rejected = nil // an empty answer accepts every item
	}
	fp := batch.fingerprint()

	if d != nil {
		status, body := s.processFormat(cfg, &rec, d, batch, formatItems, buf.Bytes(), fp, poisoned, rejected)
		if d.name == FormatCustom && status < http.StatusMultipleChoices {
			body = answerLoaded(body, cfg.AnswerLoad)
		}
		if status == http.StatusNoContent {
			w.WriteHeader(status)
			if len(body) > 0 {
				_, _ = w.Write(body)
			}
			return
		}
		writeJSON(w, status, body)
		return
	}
	status, body, bad := s.process(cfg, &rec, batch, fp, poisoned, rejected)
	if bad {
		writeBadAnswer(w, cfg.BadAnswer, batch)
		return
	}
	writeJSON(w, status, body)
}

// hold notes the ids of a request that arrived, counting those another
// unanswered request already holds.
func (s *Server) hold(batch *wireBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch.Items {
		id := batch.Items[i].ID.key()
		if s.held[id] > 0 {
			s.stats.OverlappingIDs++
		}
		s.held[id]++
	}
}

// unhold releases the ids of a request that was answered or abandoned.
func (s *Server) unhold(batch *wireBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch.Items {
		id := batch.Items[i].ID.key()
		if s.held[id] <= 1 {
			delete(s.held, id)
			continue
		}
		s.held[id]--
	}
}

// process applies a decoded batch under the lock and returns the answer;
// bad means the answer is cfg.BadAnswer's body, to be written by the
// caller, outside the lock.
func (s *Server) process(cfg Config, rec *requestRecord, batch *wireBatch, fp uint64, poisoned bool, rejected []int) (status int, body []byte, bad bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.ItemsReceived += int64(len(batch.Items))

	if !cfg.IgnoreIdempotencyKey {
		if ans, ok := s.answers[rec.Key]; ok {
			if ans.fingerprint != fp {
				s.stats.KeyConflicts++
				rec.Status = http.StatusUnprocessableEntity
				s.recordLocked(*rec)
				return rec.Status, errorBody("Idempotency-Key was already used for a batch of different items"), false
			}
			s.stats.KeyReplays++
			rec.Status, rec.Replayed = ans.status, true
			s.recordLocked(*rec)
			return ans.status, ans.body, false
		}
	}
	if cfg.MaxBatchItems > 0 && len(batch.Items) > cfg.MaxBatchItems {
		rec.Status = http.StatusRequestEntityTooLarge
		s.recordLocked(*rec)
		return rec.Status, errorBody(fmt.Sprintf("batch holds %d items, at most %d allowed", len(batch.Items), cfg.MaxBatchItems)), false
	}
	if poisoned {
		rec.Status = http.StatusBadRequest
		s.recordLocked(*rec)
		return rec.Status, errorBody(fmt.Sprintf("batch holds an item with field %s", cfg.PoisonField)), false
	}
	if cfg.BadAnswer != "" && cfg.BadAnswer != BadAnswerEmpty {
		// Whoever answered stored nothing: no delivery, no remembered key.
		s.stats.BadAnswers++
		rec.Status = http.StatusOK
		s.recordLocked(*rec)
		return rec.Status, nil, true
	}

	rec.Status = http.StatusOK
	rec.acceptedAt = s.now()
	reqIndex := int32(len(s.requests))
	s.recordLocked(*rec)

	next := 0 // walks rejected, which is in item order
	for i := range batch.Items {
		if next < len(rejected) && rejected[next] == i {
			next++
			continue
		}
		it := &batch.Items[i]
		s.acceptLocked(pair{id: it.ID.key(), version: it.Version}, it.Deleted, rec.Key, reqIndex)
		s.keepLocked(it)
	}
	s.stats.ItemsAccepted += int64(len(batch.Items) - len(rejected))
	s.stats.ItemsRejected += int64(len(rejected))

	body = resultsBody(batch, rejected, cfg.RejectField)
	if cfg.BadAnswer == BadAnswerEmpty {
		body = []byte{}
	}
	if !cfg.IgnoreIdempotencyKey {
		s.answers[rec.Key] = cachedAnswer{status: rec.Status, body: body, fingerprint: fp}
	}
	return rec.Status, body, false
}

// abandon records a request that gets no answer and drops its connection.
// Returning from the handler instead would make net/http answer 200 with an
// empty body, which the contract reads as "all accepted".
func (s *Server) abandon(rec requestRecord) {
	rec.Status = 0
	s.record(rec)
	panic(http.ErrAbortHandler)
}

func (s *Server) refuse(w http.ResponseWriter, rec *requestRecord, status int, msg string) {
	rec.Status = status
	s.record(*rec)
	writeJSON(w, status, errorBody(msg))
}

// wait holds the request for d (forever when d is 0) and reports whether it
// should still be answered: not when the client gave up or the fake closed.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		return true
	case <-r.Context().Done():
		return false
	case <-s.closed:
		return false
	}
}
