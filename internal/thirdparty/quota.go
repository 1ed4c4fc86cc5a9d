package thirdparty

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxWait is what an absurdly long wait (Retry-After: 999999999999, a reset
// in the year 9999) becomes: the longest time.Duration, so nothing
// overflows. Bounding the wait to something sensible is the caller's
// policy (SYNCER_MAX_RETRY_AFTER), not this package's.
const maxWait = time.Duration(math.MaxInt64)

// epochSeconds is where an X-RateLimit-Reset stops reading as "seconds
// from now" and starts reading as a Unix time: 10^9 seconds is almost 32
// years, no window is that long, and 10^9 as a time is 2001, before any
// answer this client will read. epochMillis likewise for Unix times in
// milliseconds, which some APIs send.
const (
	epochSeconds = 1e9
	epochMillis  = 1e12
)

// parseRetryAfter reads Retry-After in either form RFC 9110 allows. A
// negative, past or unreadable value is 0: the caller then falls back to its
// own backoff rather than trusting a wait it cannot interpret. A huge value
// is kept as maxWait rather than cut to some guess here, so the caller sees
// that it was huge.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if isDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(maxWait/time.Second) {
			return maxWait // all digits, so only too large can fail
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		// time.Time.Sub saturates instead of overflowing.
		return max(0, t.Sub(now))
	}
	return 0
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseQuota reads what an answer says of the third party's request
// budget. Three spellings exist in the wild, tried in this order and never
// mixed: the IETF httpapi draft's RateLimit-Limit / RateLimit-Remaining /
// RateLimit-Reset (reset in seconds), its combined RateLimit header
// ("limit=10, remaining=0, reset=3", or the later "r=0;t=3"), and the older
// X-RateLimit-* (reset in seconds or as a Unix time). A value that does not
// parse is ignored, and a spelling without a readable remaining count says
// nothing: a budget half understood is not trusted.
func parseQuota(h http.Header, now time.Time) Quota {
	// Most answers say nothing of a quota: three lookups of the keys as
	// net/http canonicalizes them tell so without six Gets.
	if len(h["Ratelimit-Remaining"]) == 0 && len(h["Ratelimit"]) == 0 && len(h["X-Ratelimit-Remaining"]) == 0 {
		return Quota{}
	}
	if q, ok := quotaFrom(h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), false, now); ok {
		return q
	}
	if v := h.Get("RateLimit"); v != "" {
		var limit, remaining, reset string
		for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' }) {
			name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "limit":
				limit = value
			case "remaining", "r":
				remaining = value
			case "reset", "t":
				reset = value
			}
		}
		if q, ok := quotaFrom(limit, remaining, reset, false, now); ok {
			return q
		}
	}
	if q, ok := quotaFrom(h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"), true, now); ok {
		return q
	}
	return Quota{}
}

func quotaFrom(limit, remaining, reset string, epochAllowed bool, now time.Time) (Quota, bool) {
	rem, ok := parseCount(remaining)
	if !ok {
		return Quota{}, false
	}
	q := Quota{Known: true, Remaining: rem}
	if l, ok := parseCount(limit); ok {
		q.Limit = l
	}
	if d, ok := parseReset(reset, epochAllowed, now); ok {
		q.Reset = d
	}
	return q, true
}

// parseCount reads a non-negative request count. The draft allows a list
// ("10, 10;w=1, 1000;w=3600"): the first item is the one in force.
func parseCount(v string) (int, bool) {
	v, _, _ = strings.Cut(v, ",")
	v, _, _ = strings.Cut(v, ";")
	v = strings.Trim(strings.TrimSpace(v), `"`)
	if !isDigits(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int(n), true
}

// parseReset reads a reset as seconds from now (fractions allowed), or,
// where epochAllowed, as a Unix time in seconds or milliseconds when the
// number is too large to be a wait (see epochSeconds).
func parseReset(v string, epochAllowed bool, now time.Time) (time.Duration, bool) {
	v, _, _ = strings.Cut(v, ",")
	v, _, _ = strings.Cut(v, ";")
	v = strings.Trim(strings.TrimSpace(v), `"`)
	if v == "" || v[0] < '0' || v[0] > '9' {
		return 0, false // also rules out signs, "NaN" and "Inf"
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	if epochAllowed && f >= epochSeconds {
		var at time.Time
		if f >= epochMillis {
			at = time.UnixMilli(int64(min(f, math.MaxInt64/2)))
		} else {
			at = time.Unix(int64(f), 0)
		}
		return max(0, at.Sub(now)), true
	}
	if f >= float64(maxWait/time.Second) {
		return maxWait, true
	}
	return time.Duration(f * float64(time.Second)), true
}
