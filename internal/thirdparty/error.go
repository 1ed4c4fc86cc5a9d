package thirdparty

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// bodyLimit bounds how much of an error response is kept: enough to read
// the third party's explanation, not enough to flood a log.
const bodyLimit = 512

// Error is a push that did not end in a 2xx answer: either the third party
// answered with another status (StatusCode set) or no answer came (StatusCode
// 0, Err set). Its methods say what the caller should do with the batch.
type Error struct {
	// StatusCode is the HTTP status of the answer, 0 when there was none.
	StatusCode int
	// RetryAfter is the wait the third party asked for in Retry-After, in
	// seconds or as an HTTP date resolved against Config.Now; 0 when absent.
	RetryAfter time.Duration
	// Body is the start of the response body (at most about 512 bytes), with
	// the token removed should the third party echo it.
	Body string
	// Err is the transport error when no answer came; nil otherwise.
	Err error
	// Timeout is set when the request ran out of Config.Timeout.
	Timeout bool
	// Quota is what the answer's rate-limit headers said, if anything.
	Quota Quota
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("thirdparty: push ")
	switch {
	case e.StatusCode != 0:
		fmt.Fprintf(&b, "refused with status %d", e.StatusCode)
		if text := http.StatusText(e.StatusCode); text != "" {
			b.WriteString(" " + text)
		}
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
		}
		if e.Body != "" {
			b.WriteString(": " + strconv.Quote(e.Body))
		}
	case e.Timeout:
		b.WriteString("timed out")
		if e.Err != nil {
			b.WriteString(": " + e.Err.Error())
		}
	default:
		b.WriteString("failed")
		if e.Err != nil {
			b.WriteString(": " + e.Err.Error())
		}
	}
	return b.String()
}

// Unwrap returns the transport error, so errors.Is(err, context.Canceled)
// holds when the caller's context ended the push.
func (e *Error) Unwrap() error { return e.Err }

// RateLimited reports a 429: send nothing before RetryAfter has passed; the
// rows are not at fault.
func (e *Error) RateLimited() bool { return e.StatusCode == http.StatusTooManyRequests }

// BatchRefused reports that the batch as a whole was refused (413, 400,
// 422): split it and retry the halves, down to single items.
func (e *Error) BatchRefused() bool {
	switch e.StatusCode {
	case http.StatusRequestEntityTooLarge, http.StatusBadRequest, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// AuthRefused reports bad credentials (401, 403): stop pushing and say so;
// the rows are not at fault.
func (e *Error) AuthRefused() bool {
	return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
}

// Transient reports that the same batch may succeed later: 408, 409, 5xx,
// timeouts, connection errors, and any status the contract does not name
// (a 404 from a proxy in front of the third party says nothing about the
// rows). It is false exactly when one of the other classes holds.
func (e *Error) Transient() bool {
	return !e.RateLimited() && !e.BatchRefused() && !e.AuthRefused()
}

// Class is what a push error asks of the caller.
type Class int

const (
	// ClassNone is the class of a nil error.
	ClassNone Class = iota
	// ClassTransient: retry with backoff; counts against the circuit breaker.
	ClassTransient
	// ClassRateLimited: wait for Retry-After; not a failure.
	ClassRateLimited
	// ClassBatchRefused: split the batch.
	ClassBatchRefused
	// ClassAuth: stop pushing, credentials are wrong.
	ClassAuth
)

// String returns a short lowercase name fit for a log attribute or a
// metric label.
func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassTransient:
		return "transient"
	case ClassRateLimited:
		return "rate_limited"
	case ClassBatchRefused:
		return "batch_refused"
	case ClassAuth:
		return "auth"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Classify says what err asks of the caller. An error that is not an
// [*Error] (a caller's own wrapping of a context error, say) is transient:
// retrying is the safe answer to the unknown.
func Classify(err error) Class {
	if err == nil {
		return ClassNone
	}
	var e *Error
	if !errors.As(err, &e) {
		return ClassTransient
	}
	switch {
	case e.RateLimited():
		return ClassRateLimited
	case e.BatchRefused():
		return ClassBatchRefused
	case e.AuthRefused():
		return ClassAuth
	}
	return ClassTransient
}

// parseRetryAfter reads Retry-After in either form RFC 9110 allows. A
// negative or unreadable value is 0: the caller then falls back to its own
// backoff rather than trusting a wait it cannot interpret.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Cap before multiplying so a silly value cannot overflow.
		const maxSecs = int64(365 * 24 * 3600)
		return time.Duration(min(secs, maxSecs)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// isTimeout tells whether err is the per-request deadline expiring rather
// than the caller's context ending.
func isTimeout(parent context.Context, err error) bool {
	if parent.Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
