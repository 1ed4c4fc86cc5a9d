package soak

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// The faults the API front injects; apiNone passes every request to the fake.
const (
	apiNone     = ""
	api5xx      = "api-5xx"       // 503s, before the fake sees the request
	api429Bare  = "api-429-bare"  // 429 with no Retry-After and no limit headers
	api429Retry = "api-429-retry" // 429 with Retry-After
	apiLatency  = "api-latency"   // answers seconds late
	apiReset    = "api-reset"     // the connection reset, before or after the fake accepted
	apiSlowBody = "api-slow-body" // the answer trickles out
	apiOutage   = "api-outage"    // nothing but 503 for its whole length
)

// api is one destination: the project's fake third party behind a front
// that injects the schedule's faults and records what each request sent,
// so the checks can compare the third party's last word on every key with
// the database.
type api struct {
	fake   *fakethirdparty.Server
	srv    *httptest.Server
	format string // fakethirdparty's Config.Format; "" syncer's own
	cfg    fakethirdparty.Config

	mu       sync.Mutex
	active   []activeFault // the faults under way, the latest last
	rng      *rand.Rand
	bodies   map[string]keptBody // Idempotency-Key → the body it first came with
	conflict []keyConflict       // keys that came with a second body
	payloads map[string]map[int64]json.RawMessage
	injected map[string]int64 // requests answered by a fault, by kind
}

func newAPI(seed uint64, format string) *api {
	cfg := fakethirdparty.Config{Format: format}
	if format == fakethirdparty.FormatStandardWebhooks {
		cfg.SigningSecret = hooksSecret
	}
	a := &api{
		fake:     fakethirdparty.New(cfg),
		format:   format,
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(seed, seed^0x5eed)),
		bodies:   map[string]keptBody{},
		payloads: map[string]map[int64]json.RawMessage{},
		injected: map[string]int64{},
	}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

func (a *api) url() string { return a.srv.URL }

func (a *api) close() { a.srv.CloseClientConnections(); a.srv.Close() }

type activeFault struct {
	kind  string
	share float64
}

// push starts a fault for a share of requests (0..1); faults overlap, and
// the latest wins but for an outage, which wins over everything.
func (a *api) push(kind string, share float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.active = append(a.active, activeFault{kind, share})
}

// pop ends the oldest fault of that kind under way.
func (a *api) pop(kind string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, f := range a.active {
		if f.kind == kind {
			a.active = append(a.active[:i], a.active[i+1:]...)
			return
		}
	}
}

// current is the fault answering now, and its share.
func (a *api) currentLocked() (string, float64) {
	if len(a.active) == 0 {
		return apiNone, 0
	}
	for _, f := range a.active {
		if f.kind == apiOutage {
			return f.kind, 1
		}
	}
	f := a.active[len(a.active)-1]
	return f.kind, f.share
}

func (a *api) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		a.fake.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	a.mu.Lock()
	fault, share := a.currentLocked()
	if a.rng.Float64() >= share {
		fault = apiNone
	}
	// A token endpoint's answer is never lost after it rotated the
	// refresh token: nobody would know the new one, the old one is spent,
	// and an endpoint that revokes the family on reuse without a reuse
	// interval (as the soak's does) cuts the tenant off whatever the
	// client does next (docs/design.md, "A refresh token spent once").
	after := a.rng.IntN(2) == 0 && !strings.HasSuffix(r.URL.Path, "/oauth/token")
	if fault != apiNone {
		a.injected[fault]++
	} else if a.cfg.AnswerLoad > 0 {
		a.injected[slowResponse]++
	}
	a.mu.Unlock()
	a.record(r.Header.Get("Idempotency-Key"), r.URL.Path, body, time.Now())

	switch fault {
	case api5xx, apiOutage:
		http.Error(w, "soak: service unavailable", http.StatusServiceUnavailable)
		return
	case api429Bare:
		w.WriteHeader(http.StatusTooManyRequests)
		return
	case api429Retry:
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	case apiLatency:
		select {
		case <-time.After(time.Duration(500+a.intn(2500)) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	case apiReset:
		if after {
			// The third party accepts, and the answer is lost: the client
			// must send the same body under the same key again.
			a.fake.ServeHTTP(httptest.NewRecorder(), r)
		}
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				if tc, ok := c.(interface{ SetLinger(int) error }); ok {
					_ = tc.SetLinger(0)
				}
				_ = c.Close()
			}
		}
		return
	case apiSlowBody:
		rec := httptest.NewRecorder()
		a.fake.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(rec.Body.Len()))
		w.WriteHeader(rec.Code)
		rc := http.NewResponseController(w)
		b := rec.Body.Bytes()
		step := max(1, len(b)/20)
		for i := 0; i < len(b); i += step {
			if _, err := w.Write(b[i:min(len(b), i+step)]); err != nil {
				return
			}
			_ = rc.Flush()
			time.Sleep(100 * time.Millisecond)
		}
		return
	}
	a.fake.ServeHTTP(w, r)
}

func (a *api) intn(n int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rng.IntN(n)
}

// record keeps the body under its key (keyconflict.go) and every item's
// payload under its (id, version).
func (a *api) record(key, path string, body []byte, at time.Time) {
	items := sentItems(a.format, path, body)
	sum := sha256.Sum256(body)
	a.mu.Lock()
	defer a.mu.Unlock()
	if key != "" {
		if first, ok := a.bodies[key]; !ok {
			a.bodies[key] = keepBody(sum, path, body, at)
		} else if first.sum != sum {
			a.conflict = append(a.conflict, keyConflict{key: key, first: first, second: keepBody(sum, path, body, at)})
		}
	}
	for _, it := range items {
		if it.Deleted {
			continue
		}
		m := a.payloads[it.ID]
		if m == nil {
			m = map[int64]json.RawMessage{}
			a.payloads[it.ID] = m
		}
		m[it.Version] = it.Payload
	}
}

// last is the third party's last word on every id: the highest version it
// accepted, whether that was a tombstone, and the payload sent with it.
type last struct {
	version int64
	deleted bool
	payload json.RawMessage
}

func (a *api) lastWords() map[string]last {
	out := map[string]last{}
	for _, d := range a.fake.Deliveries() {
		id := d.Text
		if id == "" {
			id = strconv.FormatInt(d.ID, 10)
		}
		if l, ok := out[id]; ok && l.version >= d.Version {
			continue
		}
		out[id] = last{version: d.Version, deleted: d.Deleted}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, l := range out {
		if !l.deleted {
			l.payload = a.payloads[id][l.version]
			out[id] = l
		}
	}
	return out
}

// accepted reports the (id, version) pairs the fake accepted.
func (a *api) accepted() map[string]map[int64]bool {
	out := map[string]map[int64]bool{}
	for _, d := range a.fake.Deliveries() {
		id := d.Text
		if id == "" {
			id = strconv.FormatInt(d.ID, 10)
		}
		m := out[id]
		if m == nil {
			m = map[int64]bool{}
			out[id] = m
		}
		m[d.Version] = true
	}
	return out
}

func (a *api) conflicts() []keyConflict {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]keyConflict(nil), a.conflict...)
}

func (a *api) injectedCounts() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int64{}
	for k, v := range a.injected {
		out[k] = v
	}
	return out
}
