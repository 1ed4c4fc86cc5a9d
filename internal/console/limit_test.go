package console

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An address is counted alone if IPv4 (mapped or not), with its /64 if
// IPv6, whatever its port or zone.
func TestClientPrefix(t *testing.T) {
	t.Parallel()
	for remote, want := range map[string]string{
		"203.0.113.9:51234":             "203.0.113.9/32",
		"[::ffff:203.0.113.9]:80":       "203.0.113.9/32",
		"[2001:db8:1:2:aaaa::1]:443":    "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:ffff::7]:1": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:22":             "fe80::/64",
		"2001:db8:1:3::1":               "2001:db8:1:3::/64",
		"not an address":                "invalid Prefix",
		"":                              "invalid Prefix",
	} {
		require.Equal(t, want, clientPrefix(remote).String(), remote)
	}
}

// remoteFrom sets each request's RemoteAddr from a header the test
// writes, as if it came from that address: thousands of addresses, IPv6
// ones among them, without thousands of interfaces.
func remoteFrom(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = r.Header.Get("X-Test-Remote-Addr")
		r.Header.Del("X-Test-Remote-Addr")
		h.ServeHTTP(w, r)
	})
}

// bearerFrom is bearer from remote.
func (s *authSetup) bearerFrom(t *testing.T, remote, tok string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+"/console/no-such-page", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("X-Test-Remote-Addr", remote)
	return s.do(t, http.DefaultClient, req)
}

// A spray of guesses from very many addresses keeps a bounded table;
// the address that keeps guessing through it stays limited (the spray
// does not evict it), and a new address signs in.
func TestFailuresBoundedUnderSpray(t *testing.T) {
	t.Parallel()
	const table = 50
	s := setupAuth(t, Config{SignInAddresses: table}, remoteFrom)
	const hammer = "198.51.100.7:4000"
	for range 20 {
		s.bearerFrom(t, hammer, "guess")
	}
	requireLimited(t, s.bearerFrom(t, hammer, consoleToken), "the hammer, before the spray")
	for i := range 2000 {
		var remote string
		if i%2 == 0 {
			remote = fmt.Sprintf("10.%d.%d.1:5000", i/256, i%256)
		} else {
			remote = fmt.Sprintf("[2001:db8:%x::1]:5000", i) // a /64 each
		}
		require.Equal(t, http.StatusUnauthorized, s.bearerFrom(t, remote, "guess").code, remote)
		require.LessOrEqual(t, s.console.failures.len(), table, "after %d addresses", i+1)
		if i%10 == 0 {
			requireLimited(t, s.bearerFrom(t, hammer, "guess"), "the hammer, during the spray")
		}
	}
	requireLimited(t, s.bearerFrom(t, hammer, consoleToken), "the hammer, after the spray")
	require.Equal(t, http.StatusNotFound, s.bearerFrom(t, "192.0.2.1:1", consoleToken).code, "a new address")

	// The addresses of one /64 are one address: rotating through them
	// buys nothing.
	for i := range FailedSignInBurstDefault {
		require.Equal(t, http.StatusUnauthorized, s.bearerFrom(t, fmt.Sprintf("[2001:db8:ffff:1::%x]:1", i+1), "guess").code)
	}
	requireLimited(t, s.bearerFrom(t, "[2001:db8:ffff:1:dead:beef::1]:1", consoleToken), "another address of the same /64")
}

// The limiter alone: a burst, then one failure given back every every; a
// success gives back its own failure only; an address whose bucket is
// full again is forgotten.
func TestFailuresBucket(t *testing.T) {
	t.Parallel()
	f := newFailures(10*time.Second, 3, 100)
	a := netip.MustParsePrefix("192.0.2.1/32")
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	for range 3 {
		wait, _ := f.take(a, now)
		require.Zero(t, wait)
	}
	wait, first := f.take(a, now)
	require.Equal(t, 10*time.Second, wait)
	require.True(t, first, "the first refusal of the episode")
	wait, first = f.take(a, now.Add(4*time.Second))
	require.Equal(t, 6*time.Second, wait)
	require.False(t, first, "logged once per episode")

	now = now.Add(10 * time.Second)
	wait, _ = f.take(a, now)
	require.Zero(t, wait, "one failure given back")
	f.giveBack(a, now) // it was the right token
	wait, _ = f.take(a, now)
	require.Zero(t, wait, "the success took nothing")
	wait, _ = f.take(a, now)
	require.Positive(t, wait, "but did not wipe the failures before it")

	now = now.Add(time.Minute)
	b := netip.MustParsePrefix("192.0.2.2/32")
	wait, _ = f.take(b, now)
	require.Zero(t, wait)
	f.giveBack(b, now)
	require.Zero(t, f.len(), "full buckets are forgotten")
}

// X-Forwarded-For is read only from a trusted proxy, from the right, past
// the trusted proxies; what a client wrote left of that is never taken.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tt := range []struct {
		name, remote string
		forwarded    []string
		trusted      []netip.Prefix
		want         string
	}{
		{"no trusted proxies: never read", "10.0.0.1:1", []string{"203.0.113.9"}, nil, "10.0.0.1:1"},
		{"not from a trusted proxy", "198.51.100.1:1", []string{"203.0.113.9"}, proxies, "198.51.100.1:1"},
		{"one trusted proxy", "10.0.0.1:1", []string{"203.0.113.9"}, proxies, "203.0.113.9"},
		{"a client's own header left of it", "10.0.0.1:1", []string{"192.0.2.66, 203.0.113.9"}, proxies, "203.0.113.9"},
		{"two trusted proxies, two headers", "[fd00::1]:1", []string{"192.0.2.66", "203.0.113.9, 10.1.2.3"}, proxies, "203.0.113.9"},
		{"no header", "10.0.0.1:1", nil, proxies, "10.0.0.1:1"},
		{"garbage: the proxy answers for it", "10.0.0.1:1", []string{"203.0.113.9, garbage"}, proxies, "10.0.0.1:1"},
		{"only trusted hops", "10.0.0.1:1", []string{"10.9.9.9"}, proxies, "10.9.9.9"},
	} {
		require.Equal(t, tt.want, clientAddr(tt.remote, tt.forwarded, tt.trusted), tt.name)
	}
}

// Behind a trusted proxy, each client behind it has its own limit; from
// anyone else, a new X-Forwarded-For on every guess buys nothing.
func TestTrustedProxyForwardedFor(t *testing.T) {
	t.Parallel()
	xff := func(s *authSetup, forwarded, tok string) answer {
		req, err := http.NewRequest(http.MethodGet, s.url+"/console/no-such-page", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Forwarded-For", forwarded)
		return s.do(t, http.DefaultClient, req)
	}
	behind := setupAuth(t, Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nil)
	for range FailedSignInBurstDefault {
		require.Equal(t, http.StatusUnauthorized, xff(behind, "203.0.113.1", "guess").code)
	}
	requireLimited(t, xff(behind, "203.0.113.1", consoleToken), "the guesser behind the proxy")
	require.Equal(t, http.StatusNotFound, xff(behind, "203.0.113.2", consoleToken).code, "another client of the proxy")
	require.Contains(t, behind.logs.String(), "address=203.0.113.1")

	direct := setupAuth(t, Config{}, nil)
	for i := range FailedSignInBurstDefault {
		require.Equal(t, http.StatusUnauthorized, xff(direct, fmt.Sprintf("203.0.113.%d", i+1), "guess").code)
	}
	requireLimited(t, xff(direct, "192.0.2.200", consoleToken), "a forged header from an untrusted peer is not read")
}
