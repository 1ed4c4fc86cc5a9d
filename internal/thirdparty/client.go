package thirdparty

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncer-dev/syncer/internal/feed"
)

// TimeoutDefault is the per-request timeout when Config.Timeout is zero.
const TimeoutDefault = 10 * time.Second

// BatchPath is appended to Config.URL to form the endpoint.
const BatchPath = "/v1/batches"

// Item is one item as exported: the one item type of every feed
// (internal/feed).
type Item = feed.Item

// Config configures a Client.
type Config struct {
	// URL is the third party's base URL, http or https; requests go to
	// URL + the request's path (the syncer format's is "/v1/batches").
	// Required.
	URL string
	// Token is sent as "Authorization: Bearer <Token>" when set. It never
	// appears in an error. Defaults to no Authorization header.
	Token string
	// Timeout bounds one request, from sending to reading the whole answer.
	// Defaults to TimeoutDefault (10s).
	Timeout time.Duration
	// HTTPClient sends the requests. Its redirect policy is never used:
	// the Client works on a shallow copy that follows no redirect, so a
	// batch and its token go to the configured origin only. Defaults to a
	// client whose Transport keeps up to 16 idle connections per host alive,
	// so concurrent workers reuse connections instead of paying a handshake
	// per batch.
	HTTPClient *http.Client
	// IdleConns is how many idle connections to the third party are kept
	// for reuse: set it to the requests in flight at once, or every answer
	// beyond it closes a connection the next request dials again. Ignored
	// with HTTPClient. Defaults to IdleConnsDefault.
	IdleConns int
	// Headers are sent with every request, before the request's own
	// Content-Type, Idempotency-Key and Authorization (which win). Values
	// are never logged. Defaults to none.
	Headers http.Header
	// Now is the clock that resolves Retry-After HTTP dates and
	// X-RateLimit-Reset Unix times. Defaults to time.Now.
	Now func() time.Time
	// Auth gives every request's Authorization header, in place of Token:
	// a rotating bearer token, basic auth, an OAuth2 token. Defaults to
	// none (Token, if set).
	Auth Authorizer
	// TLS is the TLS configuration of the requests (a private CA, a
	// client certificate). Ignored with HTTPClient. Defaults to Go's.
	TLS *tls.Config
}

// Authorizer gives the Authorization header of a request. Its errors that
// have a TokenRefused() bool method saying true refuse the credentials
// (as a 401 does); any other is transient.
type Authorizer interface {
	Authorization(ctx context.Context) (string, error)
	// Secrets are the values to scrub from whatever the third party
	// echoes back (the token, the password).
	Secrets() []string
}

// Refresher is an Authorizer whose credential may be renewed: after a 401
// to a request that carried header, the request is sent once more with
// the header it gives then, and only a second 401 refuses the credentials.
type Refresher interface {
	Refresh(header string)
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
	for k, vs := range c.Headers {
		for _, v := range vs {
			if strings.ContainsAny(k+v, "\r\n") {
				return nil, fmt.Errorf("thirdparty: config: header %s must not contain line breaks", k)
			}
		}
	}
	return u, nil
}

// Client pushes batches to one third party. It is safe for concurrent use.
type Client struct {
	base    string // the URL without its query, no trailing slash
	query   string // "?" and the URL's query, or ""
	headers http.Header
	auth    string // "Bearer <token>", or "" for none
	token   string // kept only to scrub it from echoed bodies
	// secrets are the token and the configured header values (an API key
	// read from the environment), scrubbed from whatever the third party
	// echoes back.
	secrets    []string
	timeout    time.Duration
	httpClient *http.Client
	// rt is the transport of the client New built, used directly: that
	// client has no jar, no timeout and follows no redirect, so its Do
	// would only clone every request's headers for redirects never taken.
	// Nil for a caller's client, which keeps its whole policy.
	rt  http.RoundTripper
	now func() time.Time
	// parsed is the last request URL parsed: a format's requests nearly
	// always go to one URL, and parsing it for each is a cost per request.
	parsed atomic.Pointer[parsedURL]
	authz  Authorizer
}

// parsedURL is a request URL with its parsed form, which is never changed.
type parsedURL struct {
	raw string
	u   *url.URL
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
	q := u.RawQuery
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	c := &Client{
		base:       strings.TrimSuffix(u.String(), "/"),
		headers:    cfg.Headers.Clone(),
		token:      cfg.Token,
		timeout:    cmp.Or(cfg.Timeout, TimeoutDefault),
		httpClient: cfg.HTTPClient,
		now:        cfg.Now,
		authz:      cfg.Auth,
	}
	if q != "" {
		c.query = "?" + q
	}
	if cfg.Token != "" {
		c.secrets = append(c.secrets, cfg.Token)
	}
	for _, vs := range cfg.Headers {
		for _, v := range vs {
			// Short literals (a tenant name) are no secret, and scrubbing
			// them would garble the third party's text.
			if len(v) >= 8 {
				c.secrets = append(c.secrets, v)
			}
		}
	}
	if cfg.Token != "" {
		c.auth = "Bearer " + cfg.Token
	}
	if c.httpClient == nil {
		t := newTransport(cmp.Or(cfg.IdleConns, IdleConnsDefault))
		if cfg.TLS != nil {
			t.TLSClientConfig = cfg.TLS
		}
		c.httpClient, c.rt = &http.Client{Transport: t}, t
	} else {
		hc := *c.httpClient // the caller's client keeps its own policy
		c.httpClient = &hc
	}
	// A redirect is a configuration error (docs/protocol.md, section 2): a 303
	// would turn the POST into an empty GET whose 200 reads as "all
	// accepted", a 307 would re-send the batch and the token to whatever
	// Location names. The 3xx is returned as is and becomes an *Error.
	c.httpClient.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// IdleConnsDefault is Config.IdleConns's default: the default number of
// requests in flight.
const IdleConnsDefault = 16

func newTransport(idle int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = max(64, idle)
	t.MaxIdleConnsPerHost = idle
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	// Answers are small (a status, per-item results), and asking for gzip
	// costs every request a header map of its own in net/http: they are
	// asked for as they are.
	t.DisableCompression = true
	return t
}

// Close closes idle connections. The Client stays usable; it dials anew.
func (c *Client) Close() { c.httpClient.CloseIdleConnections() }

// Result is what became of a request the third party answered: items
// named in Rejected were rejected, those in Pending are to go again, every
// other item was accepted.
type Result struct {
	Rejected []Rejection
	// Pending names items the answer neither accepted nor rejected (an
	// Elasticsearch item answered 429 or 5xx): they are to go again.
	Pending []string
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
	// ID is the item's id as the body carries it (Item.ID).
	ID    string
	Error string
}

// Push encodes items (AppendBatch) and sends them as one batch under key:
// a convenience over PushBody for callers that do not keep the body.
func (c *Client) Push(ctx context.Context, key string, items []Item) (*Result, error) {
	if len(items) == 0 {
		if key == "" {
			return nil, errors.New("thirdparty: push: empty idempotency key")
		}
		return &Result{}, nil
	}
	ids := make([]string, len(items))
	for i := range items {
		ids[i] = items[i].ID
	}
	return c.PushBody(ctx, key, AppendBatch(nil, items), ids)
}

// PushBody sends body, a request body made by AppendBatch, exactly as given
// under key, and returns which items were rejected, or an error whose class
// says what to do with the batch. ids are the ids the body holds, in their
// text form (Item.ID): an answer
// that names any other id, or one of them twice, is not an acceptance. No
// ids means an empty batch: nothing is sent. PushBody makes one attempt;
// retrying is the caller's job. It is Send with the syncer format's request
// and reading (docs/protocol.md section 2).
//
// The body is not copied: net/http may still read it briefly after
// PushBody has returned, so the caller must not change it afterwards (a
// recorded batch body never changes).
func (c *Client) PushBody(ctx context.Context, key string, body []byte, ids []string) (*Result, error) {
	if key == "" {
		return nil, errors.New("thirdparty: push: empty idempotency key")
	}
	if len(ids) == 0 {
		return &Result{}, nil
	}
	req := &Request{Path: BatchPath, ContentType: "application/json", Body: body, IDs: ids}
	return c.Send(ctx, key, req, func(a *Answer) (*Result, error) { return a.Results(ids) })
}

// Send sends one request under key (its Idempotency-Key) and hands the
// answer to read, which says what became of the request's items. Every
// rule that holds whatever the format lives here: the token and the
// configured headers go to the configured origin only, redirects are never
// followed, the answer's body is read within bounds, rate-limit headers are
// parsed, and transport failures become an [*Error]. read is called for
// every answer, 2xx or not; [Answer.Refusal] is the common reading of a
// status. A nil read takes a 2xx as accepting everything.
func (c *Client) Send(ctx context.Context, key string, r *Request, read func(*Answer) (*Result, error)) (*Result, error) {
	if key == "" {
		return nil, errors.New("thirdparty: push: empty idempotency key")
	}
	reqCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.attempt(ctx, reqCtx, key, r)
	if err != nil {
		return nil, err
	}
	defer func() {
		// Drain what is left so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	a, err := c.answer(ctx, resp)
	if err != nil {
		return nil, err
	}
	if read == nil {
		if a.refusal != nil {
			return nil, a.refusal
		}
		return &Result{Quota: a.Quota}, nil
	}
	res, err := read(a)
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = &Result{}
	}
	res.Quota = a.Quota
	return res, nil
}

// newRequest is http.NewRequestWithContext for a body held in memory,
// reusing the parse of the last URL when rawURL is the same.
func (c *Client) newRequest(ctx context.Context, method, rawURL string, body []byte) (*http.Request, error) {
	p := c.parsed.Load()
	if p == nil || p.raw != rawURL {
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, &url.Error{Op: "parse", URL: rawURL, Err: err}
		}
		p = &parsedURL{raw: rawURL, u: u}
		c.parsed.Store(p)
	}
	// An empty URL parses at no cost, and the request is made with its
	// context at once; its URL is then a copy of the one kept (net/http may
	// hold on to a request's URL, and the kept one stays as parsed).
	req, err := http.NewRequestWithContext(ctx, method, "", nil)
	if err != nil {
		return nil, err
	}
	u := *p.u
	req.URL, req.Host = &u, strings.TrimSuffix(u.Host, ":")
	// Room for the format's, the signature's and the configured headers.
	req.Header = make(http.Header, 8+len(c.headers))
	req.Body, req.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	if len(body) > 0 {
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return req, nil
}

// do sends req: through the transport when the client is New's own (as
// its Do would, user info in the URL included), else through the caller's
// client.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	if c.rt == nil {
		return c.httpClient.Do(req)
	}
	if u := req.URL.User; u != nil && len(req.Header["Authorization"]) == 0 {
		pw, _ := u.Password()
		req.SetBasicAuth(u.Username(), pw)
	}
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		// As Client.Do says it: the method, the URL (redacted by the
		// caller) and the cause.
		op := req.Method[:1] + strings.ToLower(req.Method[1:])
		return nil, &url.Error{Op: op, URL: RedactURL(req.URL.String()), Err: err}
	}
	return resp, nil
}

// attempt sends the request, with the Authorization of the moment. A 401
// to a credential that may be renewed (an OAuth2 token revoked or expired
// early) renews it and sends once more: the 401 accepted nothing, and the
// second request carries the same key and body.
func (c *Client) attempt(ctx, reqCtx context.Context, key string, r *Request) (*http.Response, error) {
	for try := 0; ; try++ {
		req, err := c.newRequest(reqCtx, cmp.Or(r.Method, http.MethodPost), c.base+r.Path+c.query, r.Body)
		if err != nil {
			redactURLError(err)
			return nil, fmt.Errorf("thirdparty: push: %w", err)
		}
		for k, v := range c.headers {
			req.Header[k] = v
		}
		if r.ContentType != "" {
			req.Header["Content-Type"] = []string{r.ContentType}
		}
		req.Header["Idempotency-Key"] = []string{key}
		auth := c.auth
		if c.authz != nil {
			if auth, err = c.authz.Authorization(reqCtx); err != nil {
				return nil, c.authError(ctx, err)
			}
		}
		if auth != "" {
			req.Header["Authorization"] = []string{auth}
		}
		if r.Sign != nil {
			r.Sign(req.Header, key, r.Body, c.now())
		}
		resp, err := c.do(req)
		if err != nil {
			return nil, c.transportError(ctx, err)
		}
		rf, ok := c.authz.(Refresher)
		if resp.StatusCode != http.StatusUnauthorized || !ok || try > 0 {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		rf.Refresh(auth)
	}
}

// authError makes an Authorizer's failure an *Error: a refusal of the
// credentials (as a 401) when it says so, transient otherwise.
func (c *Client) authError(ctx context.Context, err error) error {
	var tr interface{ TokenRefused() bool }
	if errors.As(err, &tr) && tr.TokenRefused() {
		return &Error{StatusCode: http.StatusUnauthorized, Body: c.safe(err.Error())}
	}
	return &Error{Err: err, Timeout: isTimeout(ctx, err), errText: c.safe(err.Error())}
}

// answer reads a response into an Answer: the body within bounds, the
// quota, and for a status other than 2xx the *Error the common rules make
// of it.
func (c *Client) answer(ctx context.Context, resp *http.Response) (*Answer, error) {
	now := c.now()
	a := &Answer{StatusCode: resp.StatusCode, Header: resp.Header, Quota: parseQuota(resp.Header, now), token: c.token, secrets: c.secrets}
	if c.authz != nil {
		a.secrets = append(c.authz.Secrets(), c.secrets...)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Read past SafeTextMax by a few token lengths, so a token that
		// starts inside the excerpt is read whole and redacted, never cut
		// into a prefix that would survive.
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, int64(SafeTextMax+3*len(c.token)+16)))
		a.Body = raw
		e := &Error{
			StatusCode: resp.StatusCode,
			Body:       c.safe(string(raw)),
			Quota:      a.Quota,
		}
		if v, ok := resp.Header["Retry-After"]; ok && len(v) > 0 {
			e.RetryAfter = parseRetryAfter(v[0], now)
			e.RetryAfterRaw = c.safe(v[0])
		}
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
			e.Location = c.safe(RedactURL(loc))
		}
		a.refusal = e
		return a, nil
	}
	if resp.Body == http.NoBody || resp.ContentLength == 0 {
		return a, nil // a 204, or a 200 that says nothing
	}
	// One byte past the limit tells an oversized body from one that fills
	// it exactly.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResultBody+1))
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	a.Body = raw
	if len(raw) > maxResultBody {
		return nil, a.NotAnAnswer(fmt.Sprintf("answer body is larger than %d MiB", maxResultBody>>20))
	}
	return a, nil
}

// transportError turns a failure to get an answer into an *Error, keeping
// the context error reachable with errors.Is and the URL redacted.
func (c *Client) transportError(parent context.Context, err error) error {
	redactURLError(err)
	// A transport error can quote what a broken server sent (net/http's
	// "malformed HTTP response" does), which may echo the token.
	return &Error{Err: err, Timeout: isTimeout(parent, err), errText: c.safe(err.Error())}
}

// safe makes third-party text safe to log, store and show.
func (c *Client) safe(s string) string {
	if c.authz != nil {
		return SafeText(s, append(c.authz.Secrets(), c.secrets...)...)
	}
	return SafeText(s, c.secrets...)
}

// encodeBatch writes {"items":[{"id":"42","version":3,"payload":...}]} by
// hand: an id of plain characters (a row's decimal id, most keys) is
// written as is, any other is escaped by encoding/json (deterministic, and
// the same bytes as before ids were one type), versions are integers, and
// payloads are already JSON, so nothing here needs reflection or a second
// copy.
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
		buf.WriteString(`{"id":`)
		writeID(buf, items[i].ID)
		buf.WriteString(`,"version":`)
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

// writeID writes id as the JSON string encoding/json makes of it, byte for
// byte (a recorded body is encoded again on a resend). An id of printable
// ASCII is written in place, its quotes and backslashes escaped: a
// composite key's id is a JSON array, with quotes around its text values,
// and json.Marshal for each of a batch's items cost the drain of such a
// source (issue 29). Other ids go through json.Marshal.
func writeID(buf *bytes.Buffer, id string) {
	if !asciiID(id) {
		k, _ := json.Marshal(id) // a string always marshals
		buf.Write(k)
		return
	}
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '"' || c == '\\' {
			buf.WriteString(id[start:i])
			buf.WriteByte('\\')
			start = i // the byte itself goes with the next run
		}
	}
	buf.WriteString(id[start:])
	buf.WriteByte('"')
}

// asciiID reports whether encoding/json escapes no byte of id but the
// quote and the backslash, as a backslash before it: printable ASCII but
// the three characters it escapes for HTML.
func asciiID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < 0x20 || c > 0x7e || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
