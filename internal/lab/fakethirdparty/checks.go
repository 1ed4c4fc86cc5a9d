package fakethirdparty

import (
	"cmp"
	"math"
	"net/http"
	"strconv"
	"time"
)

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
