package custom

import (
	"net/http"
	"time"
)

// Defaults for a Request.
const (
	MethodDefault      = http.MethodPost
	ContentTypeDefault = "application/json"
	// NDJSON is the content type whose body is one line per output.
	NDJSON = "application/x-ndjson"
)

// Request says how requests are made.
type Request struct {
	// Method defaults to MethodDefault (deletes: the request's).
	Method string
	// Path is appended to the destination's URL. It may hold {source}, the
	// batch's source (percent-escaped), and with PerItem {id}
	// (percent-escaped) and {version}. Defaults to "" (deletes: the
	// request's).
	Path string
	// Body is a jq program: it takes {"source", "items"} (PerItem: the
	// item) and its one output is the body. Defaults to "." (deletes: the
	// request's, and with PerItem none: a delete is sent without a body).
	Body string
	// ContentType defaults to ContentTypeDefault; NDJSON writes one line
	// per output of Body.
	ContentType string
	// PerItem sends one request per item. Defaults to false.
	PerItem bool
}

// Config configures a Format.
type Config struct {
	// Request makes the requests. Required fields: none.
	Request Request
	// Deletes, when set, sends tombstones in requests of their own, each
	// field defaulting to Request's. Defaults to nil: tombstones go with
	// the other items.
	Deletes *Request
	// Accepted is a jq program that takes {"status", "headers", "body"}
	// and must give true for a 2xx to count. Defaults to "" (any 2xx).
	Accepted string
	// Rejected is a jq program that takes the same and gives a list of
	// {"id", "error"}: those items are rejected. Defaults to "" (none).
	Rejected string
	// Refused is a jq program that takes what Accepted takes, for any
	// status, and gives true when the answer refuses the credentials (a
	// 403 wrapped in a 400, as PocketBase's batch API does): the
	// destination is held as for a 401, nothing fails. Defaults to ""
	// (the status alone says).
	Refused string
	// Retry is the same for an answer that is transient: retried under
	// backoff, nothing fails. Defaults to "".
	Retry string
	// ProgramTimeout bounds one run of any program (request, deletes,
	// response): past it, a request program fails (a *ProgramError), a
	// response program makes the answer no answer, and no core is held.
	// Defaults to ProgramTimeoutDefault.
	ProgramTimeout time.Duration
	// ProgramMemory bounds the bytes one run of any program may allocate
	// (bound.go says how they are counted); past it, the program fails as
	// one past ProgramTimeout does. Defaults to ProgramMemoryDefault.
	ProgramMemory int
	// MaxBodyBytes bounds a request body a program writes: past it, the
	// program fails. Defaults to MaxBodyBytesDefault.
	MaxBodyBytes int
}

// Defaults of a Config's bounds.
const (
	ProgramTimeoutDefault = time.Second
	ProgramMemoryDefault  = 256 << 20
	MaxBodyBytesDefault   = 16 << 20
)
