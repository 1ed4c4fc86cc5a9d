package fakethirdparty

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// FailureStatusDefault is the status of injected failures when
// Config.FailureStatus is zero.
const FailureStatusDefault = http.StatusServiceUnavailable

// MaxBodyBytes bounds a request body; beyond it the answer is 413.
const MaxBodyBytes = 64 << 20

// RedirectLocationDefault is the Location of Config.Redirect when
// Config.RedirectLocation is empty: a path on the fake itself, which answers
// 404 there, as a moved API would.
const RedirectLocationDefault = "/v1/moved"

// QuotaWindowDefault is the window of Config.Quota when Config.QuotaWindow is
// zero.
const QuotaWindowDefault = time.Second

// The values of Config.BadAnswer: 2xx answers that are not the contract's.
const (
	// BadAnswerHTML is a 200 with an HTML page, as a proxy or a login wall
	// sends.
	BadAnswerHTML = "html"
	// BadAnswerMalformed is a 200 with truncated JSON.
	BadAnswerMalformed = "malformed"
	// BadAnswerEmpty is a 200 with an empty body. The contract makes that an
	// acceptance of every item, so the fake does accept them all (ignoring
	// RejectField): the knob checks that a client takes it so.
	BadAnswerEmpty = "empty"
	// BadAnswerHuge is a 200 with a valid JSON body of more than 16 MiB.
	BadAnswerHuge = "huge"
	// BadAnswerUnknownStatus is a 200 whose results give the first item a
	// status word the contract does not have.
	BadAnswerUnknownStatus = "unknown-status"
	// BadAnswerUnknownID is a 200 whose results name an id not in the batch.
	BadAnswerUnknownID = "unknown-id"
)

// BadAnswers lists the values Config.BadAnswer accepts.
var BadAnswers = []string{BadAnswerHTML, BadAnswerMalformed, BadAnswerEmpty, BadAnswerHuge, BadAnswerUnknownStatus, BadAnswerUnknownID}

// hugeAnswerBytes is the size of a BadAnswerHuge body: past the 16 MiB a
// client reads of an answer.
const hugeAnswerBytes = 16<<20 + 1<<10

// Config holds the knobs of a Server. The zero value is a well-behaved third
// party: no limits, no failures, no token, keys honoured.
type Config struct {
	// RateLimit is the requests per second the fake accepts; beyond it,
	// 429 with Retry-After. Defaults to 0, unlimited.
	RateLimit float64
	// RateBurst is how many requests may come at once within RateLimit.
	// Defaults to RateLimit rounded up, at least 1.
	RateBurst int
	// RetryAfter is the wait sent in Retry-After on 429, in whole seconds
	// (at least 1). Defaults to the wait the limiter computes.
	RetryAfter time.Duration
	// RetryAfterHTTPDate sends Retry-After as an HTTP date rather than
	// seconds. Defaults to false.
	RetryAfterHTTPDate bool
	// FailureRate is the share (0..1) of requests answered FailureStatus.
	// Defaults to 0.
	FailureRate float64
	// FailureStatus is the status of injected failures. Defaults to
	// FailureStatusDefault (503).
	FailureStatus int
	// Latency is added to every request before it is answered. Defaults
	// to 0.
	Latency time.Duration
	// TimeoutRate is the share (0..1) of requests that get no answer until
	// the client gives up. Defaults to 0.
	TimeoutRate float64
	// MaxBatchItems answers 413 to a batch of more items. Defaults to 0,
	// no limit.
	MaxBatchItems int
	// RejectField rejects, item by item, payloads that are objects with this
	// top-level key ("field <name> is not allowed"). Defaults to "", none.
	RejectField string
	// PoisonField answers 400 to a whole batch holding a payload with this
	// top-level key. Defaults to "", none.
	PoisonField string
	// Token, when set, makes requests without "Authorization: Bearer
	// <Token>" get 401. Defaults to "", no check.
	Token string
	// IgnoreIdempotencyKey processes every request as new, as a third party
	// without idempotency would. Defaults to false: a repeated key replays
	// the first 2xx answer and accepts nothing again.
	IgnoreIdempotencyKey bool
	// Redirect answers every batch request with this 3xx status (301, 302,
	// 303, 307, 308) and Location RedirectLocation, before any other check,
	// as an http:// front of an https:// API does; nothing is accepted.
	// Defaults to 0, no redirect.
	Redirect int
	// RedirectLocation is the Location sent with Redirect. Defaults to
	// RedirectLocationDefault.
	RedirectLocation string
	// BadAnswer answers a batch that passed every check with a 200 whose body
	// is not the contract's results, one of BadAnswers. Nothing is accepted
	// and the key is not remembered (except BadAnswerEmpty, an acceptance);
	// counted in Stats.BadAnswers. Any other value is answered 500. Defaults
	// to "", contract answers.
	BadAnswer string
	// RetryAfterRaw is sent verbatim as Retry-After with 429 and outage 503
	// answers, in place of the computed wait: "999999999", a date in the
	// year 9999, "soon". Defaults to "", the computed wait.
	RetryAfterRaw string
	// UnannouncedLimit is a request rate (per second, burst its ceiling)
	// beyond which requests get a bare 429: no Retry-After, no rate-limit
	// headers, as a third party that keeps its limits to itself. Defaults to
	// 0, none.
	UnannouncedLimit float64
	// UnannouncedBurst is how many requests may come at once within
	// UnannouncedLimit: a small one refuses a fresh client's first burst
	// within milliseconds, as real APIs do. Defaults to UnannouncedLimit
	// rounded up, at least 1.
	UnannouncedBurst int
	// Quota is the requests allowed per QuotaWindow, announced on every
	// batch answer with RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (whole seconds, rounded up); once exhausted, requests
	// get 429 with those headers and no Retry-After until the window ends,
	// counted in Stats.OverQuota. Defaults to 0, no quota.
	Quota int
	// QuotaWindow is the window of Quota, aligned on the clock. Defaults to
	// QuotaWindowDefault (1s).
	QuotaWindow time.Duration
	// QuotaXHeaders announces Quota with X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time) too.
	// Defaults to false.
	QuotaXHeaders bool
	// Seed seeds the draws of FailureRate and TimeoutRate, making them
	// repeatable. Defaults to 0, a random seed.
	Seed int64
	// Now is the clock for rate limiting, outages and records. Defaults to
	// time.Now.
	Now func() time.Time
	// ExpectedItems sizes the records of accepted items for this many at
	// New and Reset. It changes no answer. A fake that shares its machine
	// with the client it measures (syncer bench) would otherwise regrow
	// its maps and copy its records again and again as a drain goes on,
	// on the cores the client needs: a drain of 100,000 tombstones went
	// from 98,000 to 109,000 a second (medians of 8) once sized. Defaults
	// to 0: records grow as items come.
	ExpectedItems int
	// Format is the format the fake speaks (Formats), fixed at New:
	// besides POST /v1/batches, requests to any other path are read in it.
	// Defaults to "" (syncer's own only).
	Format string
	// SigningSecret verifies standard-webhooks signatures (whsec_ and
	// base64): a request without a valid one gets 401. Defaults to "", no
	// check.
	SigningSecret string
	// SignatureStatus is the status of an answer to a request whose
	// signature does not verify. 400 answers as the Standard Webhooks
	// libraries' verifiers make a receiver answer: the plain text "No
	// matching signature found". Defaults to 401.
	SignatureStatus int
	// ItemTooManyRate is the share (0..1) of elasticsearch items answered
	// 429 inside a 200 bulk answer. Defaults to 0.
	ItemTooManyRate float64
}

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

type cachedAnswer struct {
	status      int
	body        []byte
	fingerprint uint64
}

// Server is the fake third party, an http.Handler. Create it with New.
type Server struct {
	mux    *http.ServeMux
	closed chan struct{}
	once   sync.Once

	mu          sync.Mutex
	cfg         Config
	now         func() time.Time
	limiter     *rate.Limiter
	bare        *rate.Limiter // UnannouncedLimit
	rng         *rand.Rand
	outageUntil time.Time
	quotaStart  time.Time // start of the current Quota window
	quotaUsed   int
	inFlight    int64
	held        map[idKey]int32 // ids of unanswered requests, with how many hold each

	stats      Stats
	byStatus   map[int]int64
	second     int64 // unix second being counted
	inSecond   int64
	requests   []requestRecord
	deliveries []delivery
	latest     byID[int64]
	pairs      byPair[pairState]
	pairKeys   map[pair][]string // further keys of pairs delivered under more than one
	answers    map[string]cachedAnswer
	keyBodies  map[string][sha256.Size]byte // format mode: the body each key came with
	docs       map[idKey]bool               // format mode: ids the receiver holds (not deleted)
	dialect    *dialect                     // Config.Format's, nil for syncer's own
}

var _ http.Handler = (*Server)(nil)

// New returns a Server with the knobs of cfg.
func New(cfg Config) *Server {
	s := &Server{closed: make(chan struct{}), cfg: cfg}
	s.resetLocked()
	s.applyLocked(cfg, true)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/v1/batches", s.handleBatch)
	if s.dialect = s.dialectOf(cfg.Format); s.dialect != nil {
		// The format's requests go wherever the destination's URL points.
		s.mux.HandleFunc("/", s.handleFormat)
	}
	s.mux.HandleFunc("GET /v1/stats", s.handleStats)
	s.mux.HandleFunc("POST /v1/admin/outage", s.handleOutage)
	s.mux.HandleFunc("POST /v1/admin/reset", s.handleReset)
	return s
}

// ServeHTTP serves POST /v1/batches, GET /v1/stats,
// POST /v1/admin/outage?duration=10s and POST /v1/admin/reset. The admin and
// stats routes ask for no token, so a test can toggle Token freely.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetConfig changes the knobs while the fake serves. Requests already past
// their checks finish under the knobs they started with. The limiter keeps
// its state unless the rate or burst change, and the random draws keep
// their sequence unless the seed changes.
func (s *Server) SetConfig(cfg Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyLocked(cfg, false)
}

func (s *Server) applyLocked(cfg Config, initial bool) {
	old := s.cfg
	s.cfg = cfg
	s.now = cfg.Now
	if s.now == nil {
		s.now = time.Now
	}
	if initial || cfg.RateLimit != old.RateLimit || cfg.RateBurst != old.RateBurst {
		s.limiter = nil
		if cfg.RateLimit > 0 {
			burst := cfg.RateBurst
			if burst <= 0 {
				burst = max(1, int(math.Ceil(cfg.RateLimit)))
			}
			s.limiter = rate.NewLimiter(rate.Limit(cfg.RateLimit), burst)
		}
	}
	if initial || cfg.UnannouncedLimit != old.UnannouncedLimit || cfg.UnannouncedBurst != old.UnannouncedBurst {
		s.bare = nil
		if cfg.UnannouncedLimit > 0 {
			burst := cmp.Or(cfg.UnannouncedBurst, max(1, int(math.Ceil(cfg.UnannouncedLimit))))
			s.bare = rate.NewLimiter(rate.Limit(cfg.UnannouncedLimit), burst)
		}
	}
	if initial || cfg.Seed != old.Seed {
		seed := uint64(cfg.Seed)
		if cfg.Seed == 0 {
			seed = rand.Uint64()
		}
		s.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	}
}

// Outage answers 503 to every batch for d from now.
func (s *Server) Outage(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outageUntil = s.now().Add(d)
}

// Reset forgets everything received: records, stats, remembered keys, a
// running outage and the limiter's debt. The knobs stay.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
	s.applyLocked(s.cfg, true)
}

func (s *Server) resetLocked() {
	s.stats = Stats{}
	s.byStatus = map[int]int64{}
	s.second, s.inSecond = 0, 0
	s.requests = nil
	n := max(s.cfg.ExpectedItems, 0)
	s.deliveries = make([]delivery, 0, n)
	s.latest = newByID[int64](n)
	s.pairs = newByPair[pairState](n)
	s.pairKeys = map[pair][]string{}
	s.answers = map[string]cachedAnswer{}
	s.keyBodies = map[string][sha256.Size]byte{}
	s.docs = make(map[idKey]bool, n)
	s.outageUntil = time.Time{}
	s.quotaStart, s.quotaUsed = time.Time{}, 0
	if s.held == nil {
		// Requests in flight during a Reset still release their ids.
		s.held = map[idKey]int32{}
	}
}

// Close releases requests held by Latency or TimeoutRate, which otherwise
// wait for their clients; call it before shutting the HTTP server down. A
// released request gets no answer: its handler aborts with
// http.ErrAbortHandler, which net/http turns into a dropped connection, so
// the client sees a transport error rather than a 200 it would read as
// "all accepted".
func (s *Server) Close() {
	s.once.Do(func() { close(s.closed) })
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

// answerKind is what the checks before reading the body decided.
type answerKind int

const (
	answerPass answerKind = iota
	answerOutage
	answerAuth
	answerRateLimited
	answerFailure
	answerHang
	answerRedirect
	answerBare
	answerOverQuota
)

// verdict is what checkLocked decided, with the quota to announce.
type verdict struct {
	kind  answerKind
	wait  time.Duration
	quota *quotaView // nil without Config.Quota
}

// quotaView is the advertised quota as one answer announces it.
type quotaView struct {
	limit, remaining int
	resetAt          time.Time
}

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

// checkLocked runs the checks that need no body, in the order a real API
// would: a redirecting front, availability, credentials, rates and quota,
// then the injected faults. The quota is computed for every answer, but
// only a request that passes the checks before it uses one up.
func (s *Server) checkLocked(cfg Config, r *http.Request, now time.Time) verdict {
	v := verdict{quota: s.quotaLocked(cfg, now)}
	if cfg.Redirect != 0 {
		v.kind = answerRedirect
		return v
	}
	if now.Before(s.outageUntil) {
		v.kind, v.wait = answerOutage, s.outageUntil.Sub(now)
		return v
	}
	if cfg.Token != "" && r.Header.Get("Authorization") != "Bearer "+cfg.Token {
		v.kind = answerAuth
		return v
	}
	if s.bare != nil && !s.bare.AllowN(now, 1) {
		v.kind = answerBare
		return v
	}
	if v.quota != nil {
		if v.quota.remaining == 0 {
			s.stats.OverQuota++
			v.kind = answerOverQuota
			return v
		}
		s.quotaUsed++
		v.quota.remaining--
	}
	if s.limiter != nil {
		res := s.limiter.ReserveN(now, 1)
		if delay := res.DelayFrom(now); !res.OK() || delay > 0 {
			// A refused request must not use up the tokens of later ones.
			res.CancelAt(now)
			v.kind, v.wait = answerRateLimited, delay
			return v
		}
	}
	if cfg.FailureRate > 0 && s.rng.Float64() < cfg.FailureRate {
		v.kind = answerFailure
		return v
	}
	if cfg.TimeoutRate > 0 && s.rng.Float64() < cfg.TimeoutRate {
		v.kind = answerHang
	}
	return v
}

// quotaLocked returns the advertised quota as it stands at now, starting a
// new window when the clock has moved into one; nil without Config.Quota.
func (s *Server) quotaLocked(cfg Config, now time.Time) *quotaView {
	if cfg.Quota <= 0 {
		return nil
	}
	window := cmp.Or(cfg.QuotaWindow, QuotaWindowDefault)
	start := now.Truncate(window)
	if !start.Equal(s.quotaStart) {
		s.quotaStart, s.quotaUsed = start, 0
	}
	return &quotaView{limit: cfg.Quota, remaining: max(0, cfg.Quota-s.quotaUsed), resetAt: start.Add(window)}
}

// setQuota announces q. Resets are whole seconds rounded up, so a client
// that waits for them never comes back early.
func setQuota(h http.Header, cfg Config, now time.Time, q *quotaView) {
	secs := int64(math.Ceil(q.resetAt.Sub(now).Seconds()))
	h.Set("RateLimit-Limit", strconv.Itoa(q.limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(q.remaining))
	h.Set("RateLimit-Reset", strconv.FormatInt(secs, 10))
	if cfg.QuotaXHeaders {
		at := q.resetAt.Unix()
		if q.resetAt.Nanosecond() != 0 {
			at++
		}
		h.Set("X-RateLimit-Limit", strconv.Itoa(q.limit))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(q.remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(at, 10))
	}
}

// writeBadAnswer writes the 200 of Config.BadAnswer for batch.
func writeBadAnswer(w http.ResponseWriter, kind string, batch *wireBatch) {
	first := batch.Items[0].ID.v
	var body []byte
	contentType := "application/json"
	switch kind {
	case BadAnswerHTML:
		contentType = "text/html; charset=utf-8"
		body = []byte("<!DOCTYPE html>\n<html><head><title>Welcome</title></head><body><h1>It works!</h1></body></html>\n")
	case BadAnswerMalformed:
		body = fmt.Appendf(nil, `{"results":[{"id":"%d","status":"accepted"`, first)
	case BadAnswerUnknownStatus:
		body = fmt.Appendf(nil, `{"results":[{"id":"%d","status":"queued"}]}`, first)
	case BadAnswerUnknownID:
		unknown := first
		for _, it := range batch.Items {
			unknown = max(unknown, it.ID.v)
		}
		unknown++ // wraps only past MaxInt64, to an id as unlikely
		for slices.ContainsFunc(batch.Items, func(it wireItem) bool { return it.ID.v == unknown }) {
			unknown++
		}
		body = fmt.Appendf(nil, `{"results":[{"id":"%d","status":"accepted"}]}`, unknown)
	case BadAnswerHuge:
		// Valid JSON, results empty: only its size is wrong. Written in
		// pieces so the fake does not hold 16 MiB per request.
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", strconv.Itoa(hugeAnswerBytes))
		w.WriteHeader(http.StatusOK)
		const head, tail = `{"results":[],"padding":"`, `"}`
		_, _ = io.WriteString(w, head)
		chunk := bytes.Repeat([]byte{'x'}, 64<<10)
		for left := hugeAnswerBytes - len(head) - len(tail); left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return // the client stopped reading, as it should
			}
		}
		_, _ = io.WriteString(w, tail)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
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

// abandon records a request that gets no answer and drops its connection.
// Returning from the handler instead would make net/http answer 200 with an
// empty body, which the contract reads as "all accepted".
func (s *Server) abandon(rec requestRecord) {
	rec.Status = 0
	s.record(rec)
	panic(http.ErrAbortHandler)
}

func (s *Server) record(rec requestRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(rec)
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

// setRetryAfter sends a wait of whole seconds (at least 1, rounding up so a
// client that obeys never comes back early), as seconds or as a date.
func (s *Server) setRetryAfter(w http.ResponseWriter, cfg Config, now time.Time, wait time.Duration) {
	if cfg.RetryAfterRaw != "" {
		w.Header().Set("Retry-After", cfg.RetryAfterRaw)
		return
	}
	secs := max(1, int64(math.Ceil(wait.Seconds())))
	if !cfg.RetryAfterHTTPDate {
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		return
	}
	// A date has one-second resolution: round up to the next whole second.
	at := now.Add(time.Duration(secs) * time.Second)
	if t := at.Truncate(time.Second); !t.Equal(at) {
		at = t.Add(time.Second)
	}
	w.Header().Set("Retry-After", at.UTC().Format(http.TimeFormat))
}

var emptyResults = []byte(`{"results":[]}`)

// resultsBody lists only rejected items: the contract makes a missing item
// accepted, and listing 500 acceptances would cost both sides for nothing.
func resultsBody(batch *wireBatch, rejected []int, field string) []byte {
	if len(rejected) == 0 {
		return emptyResults
	}
	type result struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	out := struct {
		Results []result `json:"results"`
	}{Results: make([]result, len(rejected))}
	msg := fmt.Sprintf("field %s is not allowed", field)
	for i, idx := range rejected {
		out.Results[i] = result{ID: batch.Items[idx].ID.text, Status: "rejected", Error: msg}
		if out.Results[i].ID == "" {
			out.Results[i].ID = strconv.FormatInt(batch.Items[idx].ID.v, 10)
		}
	}
	b, _ := json.Marshal(out)
	return b
}

func errorBody(msg string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(s.Stats())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) handleOutage(w http.ResponseWriter, r *http.Request) {
	d, err := time.ParseDuration(r.URL.Query().Get("duration"))
	if err != nil || d < 0 {
		writeJSON(w, http.StatusBadRequest, errorBody("duration must be a Go duration such as 10s"))
		return
	}
	s.Outage(d)
	s.mu.Lock()
	until := s.outageUntil
	s.mu.Unlock()
	b, _ := json.Marshal(struct {
		Until time.Time `json:"until"`
	}{until})
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	s.Reset()
	w.WriteHeader(http.StatusNoContent)
}
