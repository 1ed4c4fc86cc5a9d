package delivery

import (
	"errors"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Batch is what the exporter asks to deliver.
type Batch struct {
	// Key is the batch's Idempotency-Key: thirdparty.BatchKey(installation,
	// Salt, Body), or the key recorded for the same body before a crash.
	// Empty derives it from Config.Installation, Salt and Body.
	Key string
	// Salt derives the keys of split halves, so they are as stable as Key.
	Salt string
	// Items are the batch's items, in Body's order. Nil with a Body set
	// means Body is decoded when the batch must be split.
	Items []thirdparty.Item
	// Body is the request body of Items (thirdparty.AppendBatch), recorded
	// before the push so a resend is byte-identical; nil means encode Items.
	// Whatever the format, the recorded body is this canonical one: the
	// format's requests are made of it, Source and Time, deterministically.
	Body []byte
	// Source names what the items are rows of, for formats that say so
	// ("resources" or a configured source's name). Defaults to
	// SourceDefault.
	Source string
	// Time is when the batch was made, recorded with it, for formats whose
	// bodies carry a time. Zero uses the time of the first send (for
	// callers that record nothing).
	Time time.Time
	// Resent marks a batch an earlier holder recorded and did not mark: it
	// may have reached the third party, so it may only go again under Key.
	Resent bool
}

// Outcome is what the third party made of a batch, after any splitting.
type Outcome struct {
	// Accepted items are to be marked synced.
	Accepted []thirdparty.Item
	// Rejected items are to be recorded as failed for their version.
	Rejected []Rejection
	// Deferred items were answered transiently, each on its own (an
	// Elasticsearch item's 429 or 5xx, a per-item request's 404 or 410
	// once the URL is known good): neither accepted nor rejected, they go
	// again alone, after a backoff of their own (the exporter holds them),
	// and never hold their neighbours back.
	Deferred []Deferral
	// Requests is how many HTTP requests the batch took.
	Requests int
	// Withdrawn is set by a caller that answers a batch Deliver withdrew
	// (ErrWithdrawn) as nothing sent: no request went, and the batch
	// counts as no push.
	Withdrawn bool
	// Attempts are the batch's requests, one each, in the order they were
	// answered (per request, not per batch: a split or a retry adds
	// one): what the row's story shows (internal/history).
	Attempts []Attempt

	// absent are per-item requests answered 404 or 410, until Deliver
	// judges whether the items or the URL are at fault (judgeAbsent).
	absent []absence
}

// Attempt is one request of a batch and what came of it.
type Attempt struct {
	// Key is the request's Idempotency-Key.
	Key string
	// At is when the request was sent; Latency how long its answer took.
	At      time.Time
	Latency time.Duration
	// Status is the answer's HTTP status, 0 when none came.
	Status int
	// Reason is why the request did not settle its items (SafeText'd):
	// empty for an answer read as one.
	Reason string
	// Items are the items the request carried (the request's own slice).
	Items []thirdparty.Item
}

// Deferral is an item answered transiently, with the answer's status and
// text (SafeText'd).
type Deferral struct {
	Item   thirdparty.Item
	Reason string
}

// Rejection is an item the third party refused, with its reason.
type Rejection struct {
	Item  thirdparty.Item
	Error string
}

// ErrCredentials means the third party refused our credentials (401, 403).
// Nothing is failed; pushing resumes once a later probe succeeds.
var ErrCredentials = errors.New("delivery: third party refused the credentials")

// ErrConfiguration means the third party's URL is wrong: it redirects (3xx,
// never followed) or does not exist (404, 410). Nothing is failed; pushing
// resumes once a later probe succeeds.
var ErrConfiguration = errors.New("delivery: third party URL is misconfigured")

// ErrBreakerOpen means the circuit breaker is open: the third party was
// failing and is not to be called before the error's RetryAfter.
var ErrBreakerOpen = errors.New("delivery: circuit breaker open")

// ErrPaused means the third party asked for a pause (429 with Retry-After,
// or a quota used up), possibly answering another daemon: nothing is sent
// before the error's RetryAfter.
var ErrPaused = errors.New("delivery: third party asked to pause")

// ErrGaveUp means transient failures of whole requests went on for longer
// than the backoff's maximum elapsed time. The rows stay pending for a
// later run. Items answered transiently one by one are not this: they come
// back as Outcome.Deferred.
var ErrGaveUp = errors.New("delivery: gave up after transient failures")

// WaitError carries how long the caller should wait before trying again. It
// wraps one of the sentinel errors above, and the third party's answer
// (a *thirdparty.Error) when this process saw it.
type WaitError struct {
	Err  error
	Wait time.Duration
	// Attempts are the requests the batch took before the wait, as in
	// Outcome.Attempts; set on the error Deliver returns.
	Attempts []Attempt
}

func (e *WaitError) Error() string {
	return e.Err.Error() + " (retry in " + e.Wait.Round(time.Millisecond).String() + ")"
}

func (e *WaitError) Unwrap() error { return e.Err }

// RetryAfter tells a job how long to snooze.
func (e *WaitError) RetryAfter() time.Duration { return e.Wait }

// Quiet reports whether the wait is a person's pause, which the deliverer
// logs once when it starts and once when it ends: a job that waits on it
// has nothing to add.
func (e *WaitError) Quiet() bool { return errors.Is(e.Err, ErrHeld) }
