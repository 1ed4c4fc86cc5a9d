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

// Error is a push that did not end in an acceptance: the third party
// answered with a status other than 2xx (StatusCode set), answered 2xx with
// a body that is not an answer (StatusCode 2xx, BadAnswer set), or no answer
// came (StatusCode 0, Err set). Its methods say what the caller should do
// with the batch. Every text field is already SafeText: bounded, escaped,
// the token removed, fit for a log, `status` or the database.
type Error struct {
	// StatusCode is the HTTP status of the answer, 0 when there was none.
	StatusCode int
	// RetryAfter is the wait the third party asked for in Retry-After, in
	// seconds or as an HTTP date resolved against Config.Now; 0 when absent
	// or unreadable. It is not capped here: a huge value stays huge (at
	// most the longest time.Duration) for the caller to cap and report.
	RetryAfter time.Duration
	// RetryAfterRaw is the Retry-After header as sent (as SafeText), for
	// logs; "" when absent.
	RetryAfterRaw string
	// Location is where a 3xx answer pointed, redacted (RedactURL) and safe;
	// "" for other answers.
	Location string
	// BadAnswer says why a 2xx answer was not taken as an acceptance (HTML,
	// malformed JSON, an unknown status word or id...); "" otherwise.
	BadAnswer string
	// Body is the start of the response body (at most SafeTextMax bytes).
	Body string
	// Err is the transport error when no answer came; nil otherwise. Any
	// URL in it is redacted; its own text may still quote what a broken
	// server sent, so log Error(), which shows it as SafeText.
	Err error
	// Timeout is set when the request ran out of Config.Timeout.
	Timeout bool
	// Quota is what the answer's rate-limit headers said, if anything.
	Quota Quota
	// TokenEndpoint is set when no request went because the credentials'
	// token endpoint (an OAuth2 grant's) failed: its URL without secrets.
	// StatusCode is then the endpoint's status (0 when it did not
	// answer), not the destination's, and Err its failure.
	TokenEndpoint string
	// TokenRefused names what the token endpoint refused, when it did:
	// "the client credentials" (the default) or "the refresh token" of a
	// tenant's refresh_token grant.
	TokenRefused string

	errText string // Err's text as SafeText, token removed
	// verdict is a format's reading of the answer that overrides its
	// status (RefusesCredentials, Transient); why says which program.
	verdict, why string
}

const (
	verdictCredentials = "credentials"
	verdictTransient   = "transient"
)

// RefusedCredential names what the token endpoint refused: TokenRefused,
// or "the client credentials" when it is not set.
func (e *Error) RefusedCredential() string {
	if e.TokenRefused == "" {
		return "the client credentials"
	}
	return e.TokenRefused
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.TokenEndpoint != "" {
		// The endpoint's own text names it, its URL and its status:
		// "token endpoint https://auth.example/token: answered 401:
		// invalid_client: ...".
		b.WriteString("thirdparty: no request sent")
		if e.verdict == verdictCredentials {
			b.WriteString(", " + e.RefusedCredential() + " refused")
		}
		b.WriteString(": " + e.transportText())
		return b.String()
	}
	b.WriteString("thirdparty: push ")
	switch {
	case e.BadAnswer != "":
		fmt.Fprintf(&b, "answered %d %s with an unusable body (%s)", e.StatusCode, http.StatusText(e.StatusCode), e.BadAnswer)
		if e.Body != "" {
			b.WriteString(": " + e.Body)
		}
	case e.StatusCode != 0:
		fmt.Fprintf(&b, "refused with status %d", e.StatusCode)
		if text := http.StatusText(e.StatusCode); text != "" {
			b.WriteString(" " + text)
		}
		switch e.verdict {
		case verdictCredentials:
			b.WriteString(", read as refused credentials (" + e.why + ")")
		case verdictTransient:
			b.WriteString(", read as transient (" + e.why + ")")
		}
		if e.StatusCode >= 300 && e.StatusCode < 400 {
			loc := e.Location
			if loc == "" {
				loc = "nowhere"
			}
			fmt.Fprintf(&b, " (redirect to %s, not followed: check the configured URL)", loc)
		}
		if e.RetryAfterRaw != "" {
			fmt.Fprintf(&b, " (retry after %s: %q)", e.RetryAfter, e.RetryAfterRaw)
		}
		if e.Body != "" {
			b.WriteString(": " + e.Body)
		}
	case e.Timeout:
		b.WriteString("timed out")
		if e.Err != nil {
			b.WriteString(": " + e.transportText())
		}
	default:
		b.WriteString("failed")
		if e.Err != nil {
			b.WriteString(": " + e.transportText())
		}
	}
	return b.String()
}

// transportText is Err's text made safe: by the client, which knows the
// token, or here, for an Error built elsewhere.
func (e *Error) transportText() string {
	if e.errText != "" {
		return e.errText
	}
	return SafeText(e.Err.Error())
}

// Unwrap returns the transport error, so errors.Is(err, context.Canceled)
// holds when the caller's context ended the push.
func (e *Error) Unwrap() error { return e.Err }

// RateLimited reports a 429: send nothing before RetryAfter has passed; the
// rows are not at fault.
func (e *Error) RateLimited() bool {
	return e.verdict == "" && e.StatusCode == http.StatusTooManyRequests
}

// BatchRefused reports that the batch as a whole was refused (413, 400,
// 422): split it and retry the halves, down to single items.
func (e *Error) BatchRefused() bool {
	if e.verdict != "" {
		return false
	}
	switch e.StatusCode {
	case http.StatusRequestEntityTooLarge, http.StatusBadRequest, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// AuthRefused reports bad credentials (401, 403): stop pushing and say so;
// the rows are not at fault.
func (e *Error) AuthRefused() bool {
	if e.verdict != "" {
		return e.verdict == verdictCredentials
	}
	return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
}

// ConfigRefused reports an answer that says syncer is talking to the wrong
// place: a redirect (3xx, never followed, so the token and the batch never
// leave the configured origin), 404 or 410. Like AuthRefused: stop pushing,
// say so loudly, probe now and then; the rows are not at fault.
func (e *Error) ConfigRefused() bool {
	if e.verdict != "" {
		return false
	}
	switch {
	case e.StatusCode >= 300 && e.StatusCode < 400:
		return true
	case e.StatusCode == http.StatusNotFound, e.StatusCode == http.StatusGone:
		return true
	}
	return false
}

// Transient reports that the same batch may succeed later: 408, 409, 5xx,
// timeouts, connection errors, a 2xx whose body is not an answer
// (BadAnswer), and any status the contract does not name. It is false
// exactly when one of the other classes holds.
func (e *Error) Transient() bool {
	return !e.RateLimited() && !e.BatchRefused() && !e.AuthRefused() && !e.ConfigRefused()
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
	// ClassConfig: stop pushing, the URL is wrong (3xx, 404, 410).
	ClassConfig
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
	case ClassConfig:
		return "config"
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
	case e.ConfigRefused():
		return ClassConfig
	}
	return ClassTransient
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
