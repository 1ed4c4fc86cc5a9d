package fakethirdparty

import (
	"net/http"
	"time"
)

// FailureStatusDefault is the status of injected failures when
// Config.FailureStatus is zero.
const FailureStatusDefault = http.StatusServiceUnavailable

// MaxBodyBytes bounds a request body; beyond it the answer is 413.
const MaxBodyBytes = 64 << 20

// RedirectLocationDefault is the Location of Config.Redirect when
// Config.RedirectLocation is empty: a path on the fake itself, which answers
// 404 there, as a moved API would.
const RedirectLocationDefault = "/v1/moved"

// QuotaWindowDefault is the window of Config.Quota when Config.QuotaWindow is
// zero.
const QuotaWindowDefault = time.Second

// The values of Config.BadAnswer: 2xx answers that are not the contract's.
const (
	// BadAnswerHTML is a 200 with an HTML page, as a proxy or a login wall
	// sends.
	BadAnswerHTML = "html"
	// BadAnswerMalformed is a 200 with truncated JSON.
	BadAnswerMalformed = "malformed"
	// BadAnswerEmpty is a 200 with an empty body. The contract makes that an
	// acceptance of every item, so the fake does accept them all (ignoring
	// RejectField): the knob checks that a client takes it so.
	BadAnswerEmpty = "empty"
	// BadAnswerHuge is a 200 with a valid JSON body of more than 16 MiB.
	BadAnswerHuge = "huge"
	// BadAnswerUnknownStatus is a 200 whose results give the first item a
	// status word the contract does not have.
	BadAnswerUnknownStatus = "unknown-status"
	// BadAnswerUnknownID is a 200 whose results name an id not in the batch.
	BadAnswerUnknownID = "unknown-id"
)

// BadAnswers lists the values Config.BadAnswer accepts.
var BadAnswers = []string{BadAnswerHTML, BadAnswerMalformed, BadAnswerEmpty, BadAnswerHuge, BadAnswerUnknownStatus, BadAnswerUnknownID}

// Config holds the knobs of a Server. The zero value is a well-behaved third
// party: no limits, no failures, no token, keys honoured.
type Config struct {
	// RateLimit is the requests per second the fake accepts; beyond it,
	// 429 with Retry-After. Defaults to 0, unlimited.
	RateLimit float64
	// RateBurst is how many requests may come at once within RateLimit.
	// Defaults to RateLimit rounded up, at least 1.
	RateBurst int
	// RetryAfter is the wait sent in Retry-After on 429, in whole seconds
	// (at least 1). Defaults to the wait the limiter computes.
	RetryAfter time.Duration
	// RetryAfterHTTPDate sends Retry-After as an HTTP date rather than
	// seconds. Defaults to false.
	RetryAfterHTTPDate bool
	// FailureRate is the share (0..1) of requests answered FailureStatus.
	// Defaults to 0.
	FailureRate float64
	// FailureStatus is the status of injected failures. Defaults to
	// FailureStatusDefault (503).
	FailureStatus int
	// Latency is added to every request before it is answered. Defaults
	// to 0.
	Latency time.Duration
	// TimeoutRate is the share (0..1) of requests that get no answer until
	// the client gives up. Defaults to 0.
	TimeoutRate float64
	// MaxBatchItems answers 413 to a batch of more items. Defaults to 0,
	// no limit.
	MaxBatchItems int
	// RejectField rejects, item by item, payloads that are objects with this
	// top-level key ("field <name> is not allowed"). Defaults to "", none.
	RejectField string
	// PoisonField answers 400 to a whole batch holding a payload with this
	// top-level key. Defaults to "", none.
	PoisonField string
	// Token, when set, makes requests without "Authorization: Bearer
	// <Token>" get 401. Defaults to "", no check.
	Token string
	// IgnoreIdempotencyKey processes every request as new, as a third party
	// without idempotency would. Defaults to false: a repeated key replays
	// the first 2xx answer and accepts nothing again.
	IgnoreIdempotencyKey bool
	// Redirect answers every batch request with this 3xx status (301, 302,
	// 303, 307, 308) and Location RedirectLocation, before any other check,
	// as an http:// front of an https:// API does; nothing is accepted.
	// Defaults to 0, no redirect.
	Redirect int
	// RedirectLocation is the Location sent with Redirect. Defaults to
	// RedirectLocationDefault.
	RedirectLocation string
	// BadAnswer answers a batch that passed every check with a 200 whose body
	// is not the contract's results, one of BadAnswers. Nothing is accepted
	// and the key is not remembered (except BadAnswerEmpty, an acceptance);
	// counted in Stats.BadAnswers. Any other value is answered 500. Defaults
	// to "", contract answers.
	BadAnswer string
	// RetryAfterRaw is sent verbatim as Retry-After with 429 and outage 503
	// answers, in place of the computed wait: "999999999", a date in the
	// year 9999, "soon". Defaults to "", the computed wait.
	RetryAfterRaw string
	// UnannouncedLimit is a request rate (per second, burst its ceiling)
	// beyond which requests get a bare 429: no Retry-After, no rate-limit
	// headers, as a third party that keeps its limits to itself. Defaults to
	// 0, none.
	UnannouncedLimit float64
	// UnannouncedBurst is how many requests may come at once within
	// UnannouncedLimit: a small one refuses a fresh client's first burst
	// within milliseconds, as real APIs do. Defaults to UnannouncedLimit
	// rounded up, at least 1.
	UnannouncedBurst int
	// Quota is the requests allowed per QuotaWindow, announced on every
	// batch answer with RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (whole seconds, rounded up); once exhausted, requests
	// get 429 with those headers and no Retry-After until the window ends,
	// counted in Stats.OverQuota. Defaults to 0, no quota.
	Quota int
	// QuotaWindow is the window of Quota, aligned on the clock. Defaults to
	// QuotaWindowDefault (1s).
	QuotaWindow time.Duration
	// QuotaXHeaders announces Quota with X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time) too.
	// Defaults to false.
	QuotaXHeaders bool
	// Seed seeds the draws of FailureRate and TimeoutRate, making them
	// repeatable. Defaults to 0, a random seed.
	Seed int64
	// Now is the clock for rate limiting, outages and records. Defaults to
	// time.Now.
	Now func() time.Time
	// ExpectedItems sizes the records of accepted items for this many at
	// New and Reset. It changes no answer. A fake that shares its machine
	// with the client it measures (syncer-lab bench) would otherwise regrow
	// its maps and copy its records again and again as a drain goes on,
	// on the cores the client needs: a drain of 100,000 tombstones went
	// from 98,000 to 109,000 a second (medians of 8) once sized. Defaults
	// to 0: records grow as items come.
	ExpectedItems int
	// EchoAuthorization makes the fake quote the Authorization header it
	// was sent, as a careless third party or identity provider does: POST
	// /oauth/token (and /t/{tenant}/oauth/token without
	// TenantConfig.RefreshPrefix) refuses every grant with 401
	// invalid_client and an error_description quoting the header and the
	// form, and every payload a lookup answers (POST /v1/lookup) gains
	// "seen_authorization", the lookup's header (verify reads it stale).
	// Defaults to false.
	EchoAuthorization bool
	// Format is the format the fake speaks (Formats), fixed at New:
	// besides POST /v1/batches, requests to any other path are read in it.
	// Defaults to "" (syncer's own only).
	Format string
	// SigningSecret verifies standard-webhooks signatures (whsec_ and
	// base64): a request without a valid one gets 401. Defaults to "", no
	// check.
	SigningSecret string
	// SignatureStatus is the status of an answer to a request whose
	// signature does not verify. 400 answers as the Standard Webhooks
	// libraries' verifiers make a receiver answer: the plain text "No
	// matching signature found". Defaults to 401.
	SignatureStatus int
	// ItemTooManyRate is the share (0..1) of elasticsearch items answered
	// 429 inside a 200 bulk answer. Defaults to 0.
	ItemTooManyRate float64
	// ItemFailShare is the share (0..1) of item ids (ItemFails, by a hash
	// of the id: the same ids at every request) answered ItemFailStatus:
	// per item in an elasticsearch bulk answer (the others are processed),
	// as the whole request's status in standard-webhooks (one item a
	// request). Nothing of such an item is accepted, and the answer is not
	// remembered for the key. Defaults to 0, none.
	ItemFailShare float64
	// ItemFailStatus is the status of ItemFailShare's items: 503, 429, or
	// 404 for standard-webhooks. Defaults to ItemFailStatusDefault (503).
	ItemFailStatus int
	// AnswerLoad adds "n": AnswerLoad to every custom-format answer (200 or
	// 207), a count a response program may iterate over, as an API that
	// returns what it holds: a third party making a response program slow.
	// Added at write time, never remembered for the key. Defaults to 0,
	// none.
	AnswerLoad int64
	// Lookup keeps the latest accepted item of every id of syncer's own
	// format, so POST /v1/lookup answers what the fake holds (`syncer
	// verify`) and POST /v1/admin/drift can lose, edit and re-create
	// items. Defaults to false: keeping every payload costs memory a
	// benchmark's fake should not spend.
	Lookup bool
	// Tenants are the knobs of the tenants' accounts served under
	// TenantPrefix (tenants.go). Defaults to the zero TenantConfig.
	Tenants TenantConfig
}
