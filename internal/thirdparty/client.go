package thirdparty

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TimeoutDefault is the per-request timeout when Config.Timeout is zero.
const TimeoutDefault = 10 * time.Second

// BatchPath is appended to Config.URL to form the endpoint.
const BatchPath = "/v1/batches"

// maxResultBody bounds how much of a 2xx body is read: a results list for
// thousands of items fits many times over, a runaway server does not.
const maxResultBody = 16 << 20

// Item is one row as exported.
type Item struct {
	ID      int64
	Version int64
	// Payload is written to the wire as is; it must be valid JSON (a jsonb
	// value always is). An empty Payload is sent as null.
	Payload json.RawMessage
	// Deleted makes the item a tombstone: it is sent with "deleted": true
	// and no payload.
	Deleted bool
}

// Config configures a Client.
type Config struct {
	// URL is the third party's base URL, http or https; requests go to
	// URL + "/v1/batches". Required.
	URL string
	// Token is sent as "Authorization: Bearer <Token>" when set. It never
	// appears in an error. Defaults to no Authorization header.
	Token string
	// Timeout bounds one request, from sending to reading the whole answer.
	// Defaults to TimeoutDefault (10s).
	Timeout time.Duration
	// HTTPClient sends the requests. Defaults to a client whose Transport
	// keeps up to 16 idle connections per host alive, so concurrent workers
	// reuse connections instead of paying a handshake per batch.
	HTTPClient *http.Client
	// Now is the clock that resolves Retry-After HTTP dates. Defaults to
	// time.Now.
	Now func() time.Time
}

func (c *Config) validate() (*url.URL, error) {
	if c.URL == "" {
		return nil, errors.New("thirdparty: config: URL is required")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// url.Parse's error quotes the URL, which may hold a password.
		return nil, errors.New("thirdparty: config: URL is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("thirdparty: config: URL scheme must be http or https, not %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("thirdparty: config: URL has no host")
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("thirdparty: config: Timeout must not be negative, got %s", c.Timeout)
	}
	if strings.ContainsAny(c.Token, "\r\n") {
		return nil, errors.New("thirdparty: config: Token must not contain line breaks")
	}
	return u, nil
}

// Client pushes batches to one third party. It is safe for concurrent use.
type Client struct {
	endpoint   string
	auth       string // "Bearer <token>", or "" for none
	token      string // kept only to scrub it from echoed bodies
	timeout    time.Duration
	httpClient *http.Client
	now        func() time.Time
}

// New returns a Client for cfg, or an error naming the bad field.
func New(cfg *Config) (*Client, error) {
	if cfg == nil {
		return nil, errors.New("thirdparty: config is required")
	}
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Client{
		endpoint:   u.JoinPath(BatchPath).String(),
		token:      cfg.Token,
		timeout:    cmp.Or(cfg.Timeout, TimeoutDefault),
		httpClient: cfg.HTTPClient,
		now:        cfg.Now,
	}
	if cfg.Token != "" {
		c.auth = "Bearer " + cfg.Token
	}
	if c.httpClient == nil {
		c.httpClient = &http.Client{Transport: newTransport()}
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 64
	t.MaxIdleConnsPerHost = 16
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// Close closes idle connections. The Client stays usable; it dials anew.
func (c *Client) Close() { c.httpClient.CloseIdleConnections() }

// Result is what became of a batch the third party accepted with a 2xx:
// items named in Rejected were rejected, every other item was accepted.
type Result struct {
	Rejected []Rejection
	// Quota is what the answer's rate-limit headers said, if anything.
	Quota Quota
}

// Quota is what an answer's RateLimit-* or X-RateLimit-* headers said of the
// third party's own request budget. The zero value means they said nothing.
type Quota struct {
	// Known is set when the answer carried a remaining count.
	Known bool
	// Limit is the requests the window allows; 0 when not said.
	Limit int
	// Remaining is the requests left in the current window.
	Remaining int
	// Reset is how long until the window starts again, resolved against the
	// client's clock; 0 when not said.
	Reset time.Duration
}

// Rejection is one item the third party refused, with its reason.
type Rejection struct {
	ID    int64
	Error string
}

// Push sends items as one batch under key and returns which items were
// rejected, or an error whose class says what to do with the batch. An empty
// batch sends nothing. Push makes one attempt; retrying is the caller's job.
func (c *Client) Push(ctx context.Context, key string, items []Item) (*Result, error) {
	if key == "" {
		return nil, errors.New("thirdparty: push: empty idempotency key")
	}
	if len(items) == 0 {
		return &Result{}, nil
	}

	body := newPooledBody(items)
	// Push holds one reference until Do has returned; the transport holds
	// the others and drops them by closing the bodies it was given.
	defer body.release()

	reqCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, c.endpoint, nil)
	if err != nil {
		return nil, fmt.Errorf("thirdparty: push: %w", err)
	}
	req.Body = body.reader()
	req.GetBody = func() (io.ReadCloser, error) { return body.reader(), nil }
	req.ContentLength = int64(body.buf.Len())
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Idempotency-Key"] = []string{key}
	if c.auth != "" {
		req.Header["Authorization"] = []string{c.auth}
	}

	resp, err := c.httpClient.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	defer func() {
		// Drain what is left so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, bodyLimit))
		return nil, &Error{
			StatusCode: resp.StatusCode,
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), c.now()),
			Body:       c.scrub(string(bytes.ToValidUTF8(raw, nil))),
		}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResultBody))
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	return decodeResult(raw), nil
}

// transportError turns a failure to get an answer into an *Error, keeping
// the context error reachable with errors.Is.
func (c *Client) transportError(parent context.Context, err error) error {
	return &Error{Err: err, Timeout: isTimeout(parent, err)}
}

// scrub removes the token from text that came from the third party.
func (c *Client) scrub(s string) string {
	if c.token != "" {
		s = strings.ReplaceAll(s, c.token, "[redacted]")
	}
	return s
}

type wireResults struct {
	Results []struct {
		ID     json.RawMessage `json:"id"`
		Status string          `json:"status"`
		Error  string          `json:"error"`
	} `json:"results"`
}

// decodeResult reads a 2xx body. The contract makes 2xx mean accepted and
// results only name exceptions, so a body that cannot be read (or an entry
// whose id cannot) cannot turn into rejections: treating it as an error
// would resend the same batch under the same key forever.
func decodeResult(raw []byte) *Result {
	res := &Result{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return res
	}
	var w wireResults
	if err := json.Unmarshal(raw, &w); err != nil {
		return res
	}
	for _, r := range w.Results {
		if r.Status != "rejected" {
			continue
		}
		// The contract sends ids as strings; accept a bare number too.
		idText := strings.Trim(string(r.ID), `"`)
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil {
			continue
		}
		res.Rejected = append(res.Rejected, Rejection{ID: id, Error: r.Error})
	}
	return res
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// pooledBody is an encoded batch whose buffer returns to the pool once
// nobody can read it any more. http.RoundTripper may read a request body
// after Do has returned (it closes it when done), so the buffer is
// reference-counted: Push holds one reference, every reader handed to the
// transport holds one until closed.
type pooledBody struct {
	buf  *bytes.Buffer
	refs atomic.Int32
}

func newPooledBody(items []Item) *pooledBody {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	encodeBatch(buf, items)
	b := &pooledBody{buf: buf}
	b.refs.Store(1)
	return b
}

func (b *pooledBody) reader() io.ReadCloser {
	b.refs.Add(1)
	return &bodyReader{Reader: bytes.NewReader(b.buf.Bytes()), body: b}
}

func (b *pooledBody) release() {
	if b.refs.Add(-1) == 0 {
		// Oversized buffers are dropped so one huge batch does not pin its
		// memory in the pool forever.
		if b.buf.Cap() <= 4<<20 {
			bufPool.Put(b.buf)
		}
		b.buf = nil
	}
}

type bodyReader struct {
	*bytes.Reader
	body *pooledBody
	once sync.Once
}

func (r *bodyReader) Close() error {
	r.once.Do(r.body.release)
	return nil
}

// encodeBatch writes {"items":[{"id":"42","version":3,"payload":...}]} by
// hand: ids and versions are integers that need no escaping, and payloads
// are already JSON, so nothing here needs reflection or a second copy.
func encodeBatch(buf *bytes.Buffer, items []Item) {
	size := 16
	for i := range items {
		size += 56 + len(items[i].Payload)
	}
	buf.Grow(size)
	var num [20]byte
	buf.WriteString(`{"items":[`)
	for i := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"id":"`)
		buf.Write(strconv.AppendInt(num[:0], items[i].ID, 10))
		buf.WriteString(`","version":`)
		buf.Write(strconv.AppendInt(num[:0], items[i].Version, 10))
		if items[i].Deleted {
			buf.WriteString(`,"deleted":true}`)
			continue
		}
		buf.WriteString(`,"payload":`)
		if len(items[i].Payload) == 0 {
			buf.WriteString("null")
		} else {
			buf.Write(items[i].Payload)
		}
		buf.WriteByte('}')
	}
	buf.WriteString(`]}`)
}
