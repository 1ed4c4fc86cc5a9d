package soak

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// violation is one broken promise, with its time into the run.
type violation struct {
	At   time.Duration
	What string
}

// window is a stretch of the run.
type window struct{ from, to time.Duration }

// report is what a soak prints: one screen.
type report struct {
	mu           sync.Mutex
	Seed         uint64
	Duration     time.Duration
	Daemons      int
	Pooler       string
	PoolerXacts  int64 // transactions PgBouncer served
	Faults       map[string]int
	Answered     map[string]int64 // requests answered by each API fault
	Writes       int64
	WritesFailed int64
	Verifies     map[int]int // syncer verify --tenant runs beside the export, by exit status
	Tokens       string      // desk's token endpoint (tokens.go)
	Restarts     int         // daemons started again after an exit at start (daemon.startAgain)
	Accepted     int64
	Requests     int64
	Pairs        int64
	Tombstones   int64
	KeyReplays   int64
	Drained      time.Duration
	Dir          string
	Violations   []violation

	outages             []window
	sourceWorst         map[string]window // each source's longest stall outside its holds: from, to
	worst, worstOut     time.Duration     // the longest stall, and the longest outside an API outage
	worstAt, worstOutAt time.Duration
}

func newReport(c Config) *report {
	return &report{Seed: c.Seed, Duration: c.Duration, Daemons: c.Daemons, Pooler: c.Pooler, Faults: map[string]int{}, Answered: map[string]int64{}}
}

func (r *report) count(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Faults[kind]++
}

func (r *report) violate(at time.Duration, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Violations = append(r.Violations, violation{At: at, What: what})
}

func (r *report) outage(at, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outages = append(r.outages, window{at, at + d})
}

// stall records a stretch of d from at in which rows were pending and
// none was accepted.
func (r *report) stall(at, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d > r.worst {
		r.worst, r.worstAt = d, at
	}
	for _, o := range r.outages {
		if at < o.to && at+d > o.from {
			return
		}
	}
	if d > r.worstOut {
		r.worstOut, r.worstOutAt = d, at
	}
}

// sourceStall records a stretch of d from at in which a source had
// changes pending outside its holds and none was marked.
func (r *report) sourceStall(source string, at, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sourceWorst == nil {
		r.sourceWorst = map[string]window{}
	}
	if w, ok := r.sourceWorst[source]; !ok || d > w.to-w.from {
		r.sourceWorst[source] = window{at, at + d}
	}
}

// StallTarget is the longest stall outside an API outage the soak aims
// for: the lease, and 20 s for a poll, a job and the first answer.
const StallTarget = LeaseDefault + 20*time.Second

func (r *report) write(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "\nsyncer soak: seed %d, %s, %d daemons (replay: SOAK_SEED=%d SOAK_DURATION=%s SOAK_POOLER=%s make soak)\n",
		r.Seed, r.Duration, r.Daemons, r.Seed, r.Duration, r.Pooler)
	switch r.Pooler {
	case PoolerDirect:
		fmt.Fprintf(w, "pooler:     daemon %d through PgBouncer in transaction mode, SYNCER_DIRECT_URL direct: %d transactions through it\n", pooledDaemon(r.Daemons), r.PoolerXacts)
	case PoolerOnly:
		fmt.Fprintf(w, "pooler:     daemon %d through PgBouncer in transaction mode, no SYNCER_DIRECT_URL: %d transactions through it\n", pooledDaemon(r.Daemons), r.PoolerXacts)
	}
	kinds := make([]string, 0, len(r.Faults))
	total := 0
	for k, n := range r.Faults {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		s := fmt.Sprintf("%s %d", k, r.Faults[k])
		if n := r.Answered[k]; n > 0 {
			s += fmt.Sprintf(" (%d answers)", n)
		}
		parts = append(parts, s)
	}
	fmt.Fprintf(w, "faults:     %d: %s\n", total, strings.Join(parts, ", "))
	fmt.Fprintf(w, "writes:     %d statements (%d broken by faults)\n", r.Writes, r.WritesFailed)
	fmt.Fprintf(w, "verifies:   %s (tickets, a tenant each, beside the export)\n", verifyReport(r.Verifies))
	fmt.Fprintf(w, "tokens:     %s (tickets' tenants)\n", r.Tokens)
	fmt.Fprintf(w, "delivered:  %d requests, %d items accepted, %d distinct (id, version), %d tombstones, %d answered from the key cache\n",
		r.Requests, r.Accepted, r.Pairs, r.Tombstones, r.KeyReplays)
	fmt.Fprintf(w, "drained:    %s after the last fault and write\n", r.Drained)
	if r.Restarts > 0 {
		fmt.Fprintf(w, "restarts:   %d daemon starts again after an exit at start (the database unreachable), as a supervisor does\n", r.Restarts)
	}
	verdict := "within"
	if r.worstOut > StallTarget {
		verdict = "PAST"
	}
	fmt.Fprintf(w, "worst stall: %s at %s (%s outside an API outage, at %s: %s the target of %s)\n",
		r.worst.Round(time.Second), r.worstAt.Round(time.Second), r.worstOut.Round(time.Second), r.worstOutAt.Round(time.Second), verdict, StallTarget)
	if len(r.sourceWorst) > 0 {
		names := make([]string, 0, len(r.sourceWorst))
		for n := range r.sourceWorst {
			names = append(names, n)
		}
		sort.Strings(names)
		parts = parts[:0]
		for _, n := range names {
			sw := r.sourceWorst[n]
			parts = append(parts, fmt.Sprintf("%s %s at %s", n, (sw.to-sw.from).Round(time.Second), sw.from.Round(time.Second)))
		}
		fmt.Fprintf(w, "stalls:     worst by source outside the faults that hold it (target %s): %s\n", StallTarget, strings.Join(parts, ", "))
	}
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "violations: 0")
		return
	}
	fmt.Fprintf(w, "violations: %d (seed %d; files kept in %s)\n", len(r.Violations), r.Seed, r.Dir)
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(w, "  ... %d more\n", len(r.Violations)-20)
			break
		}
		fmt.Fprintf(w, "  %8s  %s\n", v.At.Round(100*time.Millisecond), v.What)
	}
}
