package thirdparty

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/redact"
)

// BatchPath is appended to Config.URL to form the endpoint.
const BatchPath = "/v1/batches"

// Item is one item as exported: the one item type of every feed
// (internal/feed).
type Item = feed.Item

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
	if pw, ok := u.User.Password(); ok && pw != "" {
		// A URL's user and password go as a Basic header (do), which a
		// third party may quote back.
		c.secrets = append(append(c.secrets, pw), redact.Basic(u.User.Username(), pw)...)
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
	// Status is the answer's HTTP status, set by Client.Send.
	Status   int
	Rejected []Rejection
	// Pending names items the answer neither accepted nor rejected (an
	// Elasticsearch item answered 429 or 5xx): they are to go again, each
	// alone, under a backoff of its own.
	Pending []string
	// PendingReasons, when set, holds why each of Pending was left so, in
	// Pending's order (its status and text, already SafeText'd).
	PendingReasons []string
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
