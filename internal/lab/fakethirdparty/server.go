package fakethirdparty

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

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
	store      *store                       // Config.Lookup's (lookup.go)
	tenants    *tenants                     // accounts under TenantPrefix, nil in an account
}

var _ http.Handler = (*Server)(nil)

// New returns a Server with the knobs of cfg.
func New(cfg Config) *Server { return newServer(cfg, true) }

// newServer returns a Server; root serves tenants' accounts under
// TenantPrefix, each itself a Server that does not.
func newServer(cfg Config, root bool) *Server {
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
	s.mux.HandleFunc("POST /v1/lookup", s.handleLookup)
	s.mux.HandleFunc("POST /oauth/token", s.handleEchoToken)
	s.mux.HandleFunc("POST /v1/admin/drift", s.handleDrift)
	s.mux.HandleFunc("POST /{index}/_mget", s.handleMget)
	if root {
		s.tenants = newTenants(cfg)
		// "/t/{tenant}/", not "/t/": a bare "/t/" would overlap
		// Elasticsearch's "/{index}/_mget" at "/t/_mget".
		s.mux.Handle(TenantPrefix+"{tenant}/", s.tenants)
		s.mux.HandleFunc("GET /v1/tenants/stats", s.handleTenantStats)
		s.mux.HandleFunc("POST /v1/admin/tenants/{tenant}/{action}", s.handleTenantAccess)
	}
	return s
}

// ServeHTTP serves POST /v1/batches, GET /v1/stats,
// POST /v1/admin/outage?duration=10s, POST /v1/admin/reset, and with
// Config.Lookup POST /v1/lookup and POST /v1/admin/drift, and every route
// again under /t/{tenant}/ as that tenant's account (tenants.go). The admin
// and stats routes ask for no token, so a test can toggle Token freely.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetConfig changes the knobs while the fake serves. Requests already past
// their checks finish under the knobs they started with. The limiter keeps
// its state unless the rate or burst change, and the random draws keep
// their sequence unless the seed changes.
func (s *Server) SetConfig(cfg Config) {
	s.mu.Lock()
	s.applyLocked(cfg, false)
	s.mu.Unlock()
	if s.tenants != nil {
		s.tenants.setBase(cfg)
	}
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
// running outage and the limiter's debt, and every tenant's account. The
// knobs stay, tenants' revocations and tokens included.
func (s *Server) Reset() {
	s.mu.Lock()
	s.resetLocked()
	s.applyLocked(s.cfg, true)
	s.mu.Unlock()
	if s.tenants != nil {
		s.tenants.reset()
	}
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
	s.store = newStore()
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
	if s.tenants != nil {
		s.tenants.close()
	}
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
