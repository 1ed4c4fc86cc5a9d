package thirdparty

import (
	"net/http"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/redact"
)

// Request is one HTTP request a destination format made of items: what
// differs between formats. What does not (the origin, the token, the
// configured headers, the Idempotency-Key, redirects, timeouts) is the
// Client's.
type Request struct {
	// Method defaults to POST.
	Method string
	// Path is appended to the configured URL as is (already escaped); ""
	// sends to the URL as written.
	Path string
	// ContentType is the Content-Type header; "" sends none.
	ContentType string
	// Body is sent exactly as given; nil sends no body.
	Body []byte
	// IDs are the ids the request carries (Item.WireID), in its order.
	IDs []string
	// Items are the items the request carries, in its order, for the
	// caller that splits a refused request and marks answered items.
	Items []Item
	// PerItem marks a request that is one item's own, at a URL every item
	// shares or one made of its id (Standard Webhooks, a custom format's
	// request.per_item): a 404 or 410 to it can say the third party does
	// not know that item, not that the URL is wrong.
	PerItem bool
	// Sign, when set, adds headers that must be fresh on every send (a
	// signature over a timestamp): it is called for each attempt with the
	// request's key, its body and the Client's clock, after every other
	// header is set. It must not change the body. Taking the body as an
	// argument lets one function sign every request of a format.
	Sign func(h http.Header, key string, body []byte, now time.Time)
}

// Answer is what came back for a Request, handed to the format's reader.
type Answer struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Header is the answer's header.
	Header http.Header
	// Body is the answer's body: for a 2xx up to 16 MiB (more is not an
	// answer), otherwise its start. It is raw third-party text: pass what
	// leaves the reader through Safe.
	Body []byte
	// Quota is what the rate-limit headers said.
	Quota Quota

	// secrets are the client's: its credentials', token and configured
	// header values.
	secrets []string
	forms   []string // every form of secrets (redact.Forms), made at first use
	refusal *Error   // set by a Client for a status other than 2xx
}

// OK reports a 2xx status.
func (a *Answer) OK() bool { return a.StatusCode >= 200 && a.StatusCode <= 299 }

// Refusal is what the common rules of docs/protocol.md section 2 make of an
// answer that is not a 2xx (its class by [Classify]); nil for a 2xx.
func (a *Answer) Refusal() error {
	if e := a.refused(); e != nil {
		return e
	}
	return nil
}

// refused is Refusal's *Error: the one a Client read (with Retry-After and
// Location), or, for an Answer a Client did not build (a format's tests,
// thirdpartytest.Answer), the one its status and body make.
func (a *Answer) refused() *Error {
	switch {
	case a.OK():
		return nil
	case a.refusal != nil:
		return a.refusal
	}
	return &Error{StatusCode: a.StatusCode, Body: a.Safe(string(a.Body)), Quota: a.Quota}
}

// RefusalText is the answer's status and body as safe text, for an item
// rejected by it.
func (a *Answer) RefusalText() string {
	text := http.StatusText(a.StatusCode)
	msg := a.Safe(string(a.Body))
	if msg != "" {
		text += ": " + msg
	}
	return a.Safe(itoa(a.StatusCode) + " " + text)
}

// NotAnAnswer is the error for an answer whose body does not say what
// became of the items (why says what is wrong): transient, retried under
// the same key, never an acceptance.
func (a *Answer) NotAnAnswer(why string) error {
	return &Error{StatusCode: a.StatusCode, BadAnswer: a.Safe(why), Body: a.Safe(string(a.Body)), Quota: a.Quota}
}

// RefusesCredentials is the error for an answer a format reads as a
// refusal of the credentials whatever its status (a 403 wrapped in a 400):
// the destination is held, nothing fails.
func (a *Answer) RefusesCredentials(why string) error {
	return &Error{StatusCode: a.StatusCode, Body: a.Safe(string(a.Body)), Quota: a.Quota, verdict: verdictCredentials, why: a.Safe(why)}
}

// Transient is the error for an answer a format reads as transient
// whatever its status: retried under backoff, nothing fails.
func (a *Answer) Transient(why string) error {
	return &Error{StatusCode: a.StatusCode, Body: a.Safe(string(a.Body)), Quota: a.Quota, verdict: verdictTransient, why: a.Safe(why)}
}

// Safe makes third-party text safe to log, store and show ([SafeText],
// with the token removed).
func (a *Answer) Safe(s string) string { return safeText(s, a.secretForms()) }

// secretForms expands the secrets once for the answer's texts (a batch
// may have hundreds of rejections), and only for an answer that has a
// text to make safe.
func (a *Answer) secretForms() []string {
	if a.forms == nil && len(a.secrets) > 0 {
		a.forms = redact.Forms(a.secrets...)
	}
	return a.forms
}

// Results reads the answer as the syncer format does (docs/protocol.md section
// 2): a status other than 2xx by the common rules; a 2xx body empty, an
// object without results, or results naming ids of the request.
func (a *Answer) Results(ids []string) (*Result, error) {
	if e := a.refused(); e != nil {
		return nil, e
	}
	res, why := decodeResult(a.Body, ids, a.Safe)
	if why != "" {
		return nil, &Error{StatusCode: a.StatusCode, BadAnswer: a.Safe(why), Body: a.Safe(string(a.Body)), Quota: a.Quota}
	}
	return res, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// Batch is what a destination format makes requests of: the items of one
// recorded batch, with what was recorded along with them.
type Batch struct {
	// Source names what the items are rows of: "resources", or a configured
	// source's name.
	Source string
	// Time is when the batch was made, recorded with it: a format's body
	// that carries a time uses this one, so a resend after a crash is
	// byte-identical.
	Time time.Time
	// Items are the batch's items, in order.
	Items []Item
}
