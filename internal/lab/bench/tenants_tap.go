package bench

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// tenantTap stands before the fake and records each batch request a
// tenant's account answers: when it arrived, its answer and the door it
// came through. The fake's sums cannot give what the tenants rows report:
// the accepted requests within a window, the 429s after a time, and which
// of two daemons (each given a door of its own) sent what.
type tenantTap struct {
	next http.Handler
	mu   sync.Mutex
	reqs []tappedRequest
}

type tappedRequest struct {
	tenant string
	at     time.Time // arrival
	status int
	door   int
}

// door is the tap's handler for requests counted as door n's.
func (t *tenantTap) door(n int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, fakethirdparty.TenantPrefix)
		tenant, route, _ := strings.Cut(rest, "/")
		if !ok || r.Method != http.MethodPost || route != "v1/batches" {
			t.next.ServeHTTP(w, r)
			return
		}
		at := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		t.next.ServeHTTP(sw, r)
		t.mu.Lock()
		t.reqs = append(t.reqs, tappedRequest{tenant: tenant, at: at, status: sw.code(), door: n})
		t.mu.Unlock()
	})
}

// requests returns what the tap recorded so far.
func (t *tenantTap) requests() []tappedRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]tappedRequest(nil), t.reqs...)
}

// statusWriter keeps the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// startTappedFake starts a fake behind a tenantTap with doors doors (at
// least one), each on a port of its own: the URLs, door 0's first, are
// where a daemon sends.
func startTappedFake(cfg fakethirdparty.Config, doors int) (*fake, *tenantTap, []string, error) {
	f := &fake{Server: fakethirdparty.New(cfg)}
	tap := &tenantTap{next: f.Server, reqs: make([]tappedRequest, 0, 1<<14)}
	var urls []string
	for n := range max(doors, 1) {
		srv, url, err := serveOn(tap.door(n))
		if err != nil {
			f.close()
			return nil, nil, nil, err
		}
		if n == 0 {
			f.srv, f.url = srv, url
		} else {
			f.doors = append(f.doors, srv)
		}
		urls = append(urls, url)
	}
	return f, tap, urls, nil
}

// tenantWindow is the accepted requests within a window of a run, the
// times after the run's first request.
type tenantWindow struct {
	from, to time.Duration
	ok       int
}

func (w tenantWindow) rate() float64 { return float64(w.ok) / (w.to - w.from).Seconds() }

// learnedAfter is the request of a tenant by which its limit counts as
// learned when no 429 came before: its account's burst (5) spent, the
// next request is the first a token bucket may refuse; a tenant paced
// under its limit by then has nothing to learn.
const learnedAfter = 6

// steadyWindow is the window while every tenant sends: from the moment
// the last tenant started (its first request, or with learned its limit
// learned: its first 429 or its learnedAfter-th request, whichever came
// first) to the moment the first tenant sent its last request. ok is
// false when there is no such window (a tenant ended before another
// started).
func steadyWindow(reqs []tappedRequest, learned bool) (tenantWindow, bool) {
	type span struct {
		first, start, last time.Time
		refused            bool // start is set: the limit learned
		n                  int
	}
	var runFirst time.Time
	by := map[string]*span{}
	for _, q := range reqs {
		if runFirst.IsZero() || q.at.Before(runFirst) {
			runFirst = q.at
		}
		sp := by[q.tenant]
		if sp == nil {
			sp = &span{first: q.at, last: q.at}
			by[q.tenant] = sp
		}
		sp.first = minTime(sp.first, q.at)
		sp.last = maxTime(sp.last, q.at)
		if sp.n++; learned && (q.status == http.StatusTooManyRequests || sp.n == learnedAfter) && (!sp.refused || q.at.Before(sp.start)) {
			sp.start, sp.refused = q.at, true
		}
	}
	var from, to time.Time
	for _, sp := range by {
		start := sp.first
		if sp.refused {
			start = sp.start
		}
		from = maxTime(from, start)
		if to.IsZero() || sp.last.Before(to) {
			to = sp.last
		}
	}
	if !to.After(from) {
		return tenantWindow{}, false
	}
	w := tenantWindow{from: from.Sub(runFirst), to: to.Sub(runFirst)}
	for _, q := range reqs {
		if q.status == http.StatusOK && !q.at.Before(from) && !q.at.After(to) {
			w.ok++
		}
	}
	return w, true
}

// lateShare is the 429s' share of the requests that arrived later than
// after past the run's first request; -1 when none did.
func lateShare(reqs []tappedRequest, after time.Duration) float64 {
	var first time.Time
	for _, q := range reqs {
		if first.IsZero() || q.at.Before(first) {
			first = q.at
		}
	}
	var n, refused int
	for _, q := range reqs {
		if q.at.Sub(first) >= after {
			n++
			if q.status == http.StatusTooManyRequests {
				refused++
			}
		}
	}
	if n == 0 {
		return -1
	}
	return float64(refused) / float64(n)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// timeline says, for each step of a run, how many tenants sent, how many
// requests came and the 429s' share of them: where a run's 429s fell.
func timeline(reqs []tappedRequest, step time.Duration) string {
	if len(reqs) == 0 {
		return "no request"
	}
	first := reqs[0].at
	for _, q := range reqs {
		first = minTime(first, q.at)
	}
	type bucket struct {
		n, refused int
		tenants    map[string]bool
	}
	var bs []*bucket
	for _, q := range reqs {
		i := int(q.at.Sub(first) / step)
		for len(bs) <= i {
			bs = append(bs, &bucket{tenants: map[string]bool{}})
		}
		b := bs[i]
		b.n++
		b.tenants[q.tenant] = true
		if q.status == http.StatusTooManyRequests {
			b.refused++
		}
	}
	var sb strings.Builder
	for i, b := range bs {
		if i > 0 {
			sb.WriteString("; ")
		}
		share := 0.0
		if b.n > 0 {
			share = 100 * float64(b.refused) / float64(b.n)
		}
		fmt.Fprintf(&sb, "%s-%s: %d tenants, %d req, %.1f%% 429", step*time.Duration(i), step*time.Duration(i+1), len(b.tenants), b.n, share)
	}
	return sb.String()
}
