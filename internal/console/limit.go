package console

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Credential paths, as the limiter's log line and metrics name them.
const (
	pathBearer = "bearer"
	pathForm   = "form"
)

// clientPrefix is the address failed authentications are counted
// against, of an IP with or without its port: an IPv4 address alone, an
// IPv6 address with the rest of its /64, which one host or one customer
// usually holds whole, so it cannot rotate through its own addresses.
// Text that is no IP (a test's RemoteAddr, a Unix socket's) is the zero
// prefix, one address for all of them.
func clientPrefix(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.WithZone("").Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// failures limits failed authentications per client address, whatever
// the credential path: a bucket of burst failures per address, one given
// back every every (GCRA: an address's state is the time its bucket is
// full again). An address whose bucket is empty is refused before its
// token is even compared, so a limited guesser learns nothing, not even
// from the right token; a success gives back only the failure it took.
//
// At most size addresses are kept, the one that tried least recently
// evicted first, and an address whose bucket is full again is dropped, so
// a spray from many addresses costs a bounded table. Evicting an address
// forgets its failures, but only after size other addresses tried since
// its last try: each of them had a burst of its own, so eviction never
// gives a guesser more guesses than its other addresses already had.
type failures struct {
	every time.Duration
	burst int
	size  int

	mu     sync.Mutex
	order  *list.List // of *addrState, least recently tried first
	byAddr map[netip.Prefix]*list.Element
}

// addrState is one address's bucket.
type addrState struct {
	addr netip.Prefix
	// full is when the address's bucket holds burst failures again.
	full time.Time
	// warned is set once the address's current episode of refusals was
	// logged, cleared when it may try again.
	warned bool
}

func newFailures(every time.Duration, burst, size int) *failures {
	return &failures{every: every, burst: burst, size: size, order: list.New(), byAddr: map[netip.Prefix]*list.Element{}}
}

// take counts one attempt of addr at now as failed, ahead of knowing its
// outcome, so concurrent guesses cannot pass the limit together; give
// the attempt back with giveBack when it succeeds. When addr is limited
// it takes nothing and returns how long addr must wait, and first is
// true for the first refusal of its episode (to be logged once).
func (f *failures) take(addr netip.Prefix, now time.Time) (wait time.Duration, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	el, ok := f.byAddr[addr]
	if !ok {
		f.evict(now)
		el = f.order.PushBack(&addrState{addr: addr, full: now})
		f.byAddr[addr] = el
	}
	// A limited address that keeps trying stays as recent as its last
	// try: eviction forgets only addresses that went quiet.
	f.order.MoveToBack(el)
	st := el.Value.(*addrState)
	full := st.full
	if full.Before(now) {
		full = now
	}
	full = full.Add(f.every)
	if over := full.Sub(now) - time.Duration(f.burst)*f.every; over > 0 {
		first = !st.warned
		st.warned = true
		return over, first
	}
	st.full, st.warned = full, false
	return 0, false
}

// giveBack returns the failure take counted for an attempt that
// succeeded; an address left with nothing to count is dropped.
func (f *failures) giveBack(addr netip.Prefix, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if el, ok := f.byAddr[addr]; ok {
		st := el.Value.(*addrState)
		if st.full = st.full.Add(-f.every); !st.full.After(now) {
			f.remove(el)
		}
	}
}

// evict makes room for one more address: it drops the addresses at the
// front whose bucket is full again (they hold nothing), then, if the
// table is still full, the least recently failed one.
func (f *failures) evict(now time.Time) {
	for el := f.order.Front(); el != nil && !el.Value.(*addrState).full.After(now); el = f.order.Front() {
		f.remove(el)
	}
	for f.order.Len() >= f.size {
		f.remove(f.order.Front())
	}
}

func (f *failures) remove(el *list.Element) {
	f.order.Remove(el)
	delete(f.byAddr, el.Value.(*addrState).addr)
}

// len is how many addresses are kept.
func (f *failures) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byAddr)
}

// retryAfter is a wait as Retry-After says it: whole seconds, at least 1.
func retryAfter(wait time.Duration) int {
	return max(1, int((wait+time.Second-1)/time.Second))
}

// clientOf is the address a request's failures are counted against.
func (c *Console) clientOf(r *http.Request) netip.Prefix {
	return clientPrefix(clientAddr(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), c.cfg.TrustedProxies))
}

// clientAddr is the address that sent a request: the connection's, unless
// it is a trusted proxy's. Then X-Forwarded-For is read from the right,
// where each proxy appended the peer it served, past the trusted proxies,
// to the first address that is not one: what is left of it anyone could
// have written. Without trusted proxies the header is never read.
func clientAddr(remote string, forwarded []string, trusted []netip.Prefix) string {
	if !isTrusted(remote, trusted) {
		return remote
	}
	var hops []string
	for _, v := range forwarded {
		for h := range strings.SplitSeq(v, ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	addr := remote
	for i := len(hops) - 1; i >= 0; i-- {
		if !clientPrefix(hops[i]).IsValid() {
			return addr // not written by a proxy: the last trusted one answers for it
		}
		if addr = hops[i]; !isTrusted(addr, trusted) {
			return addr
		}
	}
	return addr
}

// isTrusted says whether addr (with or without its port) is in one of
// trusted.
func isTrusted(addr string, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.WithZone("").Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
