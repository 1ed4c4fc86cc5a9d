package soak

import (
	"math/rand/v2"
	"net/http"
	"sort"
	"time"
)

// The faults of the daemons and of the database.
const (
	daemonKill      = "daemon-sigkill"  // SIGKILL, restarted after a moment
	daemonStop      = "daemon-sigstop"  // SIGSTOP for longer than the lease, then SIGCONT
	daemonTerm      = "daemon-sigterm"  // SIGTERM mid-batch, restarted once it exited
	pgTerminate     = "pg-terminate"    // pg_terminate_backend of every syncer session
	pgRestart       = "pg-restart"      // the server stopped immediate and started again
	proxyBlackholed = "proxy-blackhole" // one daemon's database route carries nothing
	proxyResets     = "proxy-reset"     // one daemon's database connections reset
)

// The faults of the pooler leg (Config.Pooler): the PgBouncer in front of
// the pooled daemon.
const (
	poolerRestart = "pooler-restart" // PgBouncer shut down at once, every client cut, started again after a moment
	poolerPause   = "pooler-pause"   // PgBouncer's PAUSE through its admin console, RESUME after a while
)

// The faults of issue 42: what held a source for good, or stopped every
// source, on 3cfe467.
const (
	itemTransient = "item-transient" // a share of search's ids answered 503 or 429 per item, for minutes
	slowResponse  = "slow-response"  // hub's answers make its response program run for a minute a request
	configReload  = "reload"         // the configuration file changed and SIGHUP to every daemon, under load
	brokenProgram = "broken-program" // hub's request program edited to fail on every row, mended by a later reload
	// connectionsLocked is issue 54's: a session of the soak's holds the
	// tenants' connections table ACCESS EXCLUSIVE, so every tenants query
	// waits on it, while every other source must keep moving.
	connectionsLocked = "connections-lock"
)

// connectionsLockFor is how long connectionsLocked holds the table.
const connectionsLockFor = 40 * time.Second

// The loads of hub's answers during slowResponse: last(range(n)) takes
// about 0.1 us a step, so a minute and more a request, unbounded.
const slowResponseLoad = 500_000_000

// fault is one event of the schedule.
type fault struct {
	At     time.Duration // from the start of the run
	Kind   string
	Target int           // the daemon, for daemon faults
	For    time.Duration // how long it lasts, where it lasts
	Share  float64       // the share of requests an API fault answers; of ids, for itemTransient
	Status int           // the status of itemTransient's items
}

// schedule draws the run's faults from its seed: overlapping, of every
// kind, over the run but for its quiet tail, in which everything drains. A
// seed gives the same schedule for the same duration and daemon count,
// which is what makes a failure replayable.
func schedule(seed uint64, d time.Duration, daemons int, lease time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x50a4))
	active := d - d/5 // the last fifth is quiet
	var out []fault
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	// About one fault every 8 seconds, at least one of each kind.
	n := max(int(active/(8*time.Second)), 16)
	kinds := []string{daemonKill, daemonStop, daemonTerm, pgTerminate, pgRestart, proxyBlackholed, proxyResets,
		api5xx, api429Bare, api429Retry, apiLatency, apiReset, apiSlowBody}
	for i := range n {
		kind := kinds[i%len(kinds)]
		if i >= len(kinds) {
			kind = kinds[rng.IntN(len(kinds))]
		}
		f := fault{At: between(2*time.Second, active-5*time.Second), Kind: kind, Target: rng.IntN(daemons)}
		switch kind {
		case daemonKill, daemonTerm:
			f.For = between(time.Second, 5*time.Second) // down for this long
		case daemonStop:
			f.For = between(lease+2*time.Second, 2*lease+5*time.Second)
		case proxyBlackholed:
			f.For = between(3*time.Second, 20*time.Second)
		case api5xx, api429Bare, api429Retry, apiLatency, apiReset, apiSlowBody:
			f.For = between(2*time.Second, 15*time.Second)
			f.Share = 0.3 + 0.7*rng.Float64()
		}
		out = append(out, f)
	}
	// One outage of the API: a minute in a long run, a sixth of a short
	// one.
	outage := min(time.Minute, d/6)
	out = append(out, fault{At: between(active/4, max(active/4, active-outage-time.Second)), Kind: apiOutage, For: outage, Share: 1})
	out = append(out, heldFaults(seed, active)...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// heldFaults draws the faults of issue 42 from a stream of their own, so
// a seed draws the same other faults as before they existed: a per-item
// transient of two to three minutes (two thirds of a short run's stretch)
// in each stretch of four minutes, never two at once; a reload every 40 s
// or so; a slow response program of 15 to 40 s every 80 s; one broken
// request program of 20 to 45 s, which a reload of its own mends; the
// tenants' connections table locked for 40 s, once.
func heldFaults(seed uint64, active time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x42))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(max(hi-lo, 0))+1))
	}
	var out []fault
	slots := max(1, int(active/(4*time.Minute)))
	slot := active / time.Duration(slots)
	for i := range slots {
		d := min(between(2*time.Minute, 3*time.Minute), slot*2/3)
		start := time.Duration(i)*slot + between(time.Second, slot-d-time.Second)
		status := http.StatusServiceUnavailable
		if rng.IntN(2) == 0 {
			status = http.StatusTooManyRequests
		}
		out = append(out, fault{At: start, Kind: itemTransient, For: d, Share: 0.02 + 0.08*rng.Float64(), Status: status})
	}
	n := max(2, int(active/(40*time.Second)))
	for range n {
		out = append(out, fault{At: between(2*time.Second, active-5*time.Second), Kind: configReload})
	}
	for range max(1, n/2) {
		out = append(out, fault{At: between(2*time.Second, active-5*time.Second), Kind: slowResponse, For: between(15*time.Second, 40*time.Second)})
	}
	d := min(between(20*time.Second, 45*time.Second), active/3)
	out = append(out, fault{At: between(2*time.Second, active-d-time.Second), Kind: brokenProgram, For: d})
	// Drawn last, so the faults above stay what a seed drew before it.
	out = append(out, fault{At: between(2*time.Second, active-connectionsLockFor-time.Second), Kind: connectionsLocked, For: connectionsLockFor})
	return out
}

// poolerFaults draws the pooler leg's faults from a stream of their own,
// so a seed draws the same other faults with the leg or without it: a
// restart of the pooler, down 1 to 5 s, and a pause of 3 to 15 s (less
// than a proxy's blackhole: the pooled daemon's lock lives on its direct
// connection meanwhile, so nobody takes its work over), each once a
// stretch of 90 s.
func poolerFaults(seed uint64, active time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x58))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(max(hi-lo, 0))+1))
	}
	var out []fault
	for range max(1, int(active/(90*time.Second))) {
		out = append(out,
			fault{At: between(2*time.Second, active-5*time.Second), Kind: poolerRestart, For: between(time.Second, 5*time.Second)},
			fault{At: between(2*time.Second, active-5*time.Second), Kind: poolerPause, For: between(3*time.Second, 15*time.Second)})
	}
	return out
}
