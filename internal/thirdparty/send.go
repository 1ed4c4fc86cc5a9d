package thirdparty

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/syncer-dev/syncer/internal/redact"
)

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
		if e := a.refused(); e != nil {
			return nil, e
		}
		return &Result{Status: a.StatusCode, Quota: a.Quota}, nil
	}
	res, err := read(a)
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = &Result{}
	}
	res.Quota = a.Quota
	res.Status = a.StatusCode
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
// credentials when it says so, transient otherwise. A token endpoint's
// failure (an OAuth2 grant's) keeps the endpoint's name and status, in
// TokenEndpoint and StatusCode: nothing was sent to the destination, and
// no log, status or console line may read it as the destination's answer.
func (c *Client) authError(ctx context.Context, err error) error {
	var tr interface{ TokenRefused() bool }
	refused := errors.As(err, &tr) && tr.TokenRefused()
	var te interface {
		TokenEndpoint() string
		EndpointStatus() int
	}
	// The endpoint's own words may quote the request it refused (its
	// Basic header, its form): scrubbed of every form of the secrets where
	// the error is made, and in the error itself, which callers reach with
	// errors.As.
	scrubChain(err, c.scrub)
	if errors.As(err, &te) {
		e := &Error{StatusCode: te.EndpointStatus(), TokenEndpoint: c.safe(te.TokenEndpoint()), Err: err,
			Timeout: isTimeout(ctx, err), errText: c.safe(err.Error()), verdict: verdictTransient, why: "token endpoint"}
		if refused {
			e.verdict = verdictCredentials
			var rc interface{ RefusedCredential() string }
			if errors.As(err, &rc) {
				e.TokenRefused = rc.RefusedCredential()
			}
		}
		return e
	}
	if refused {
		return &Error{StatusCode: http.StatusUnauthorized, Body: c.safe(err.Error())}
	}
	return &Error{Err: err, Timeout: isTimeout(ctx, err), errText: c.safe(err.Error())}
}

// answer reads a response into an Answer: the body within bounds, the
// quota, and for a status other than 2xx the *Error the common rules make
// of it.
func (c *Client) answer(ctx context.Context, resp *http.Response) (*Answer, error) {
	now := c.now()
	a := &Answer{StatusCode: resp.StatusCode, Header: resp.Header, Quota: parseQuota(resp.Header, now), secrets: c.secretsNow()}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Read past SafeTextMax by a few secret lengths, so a secret that
		// starts inside the excerpt is read whole in its longest form (a
		// JSON escape of its query escape) and redacted, never cut into a
		// prefix that would survive.
		longest := 0
		for _, s := range a.secrets {
			longest = max(longest, len(s))
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, int64(SafeTextMax+8*longest+16)))
		a.Body = raw
		e := &Error{
			StatusCode: resp.StatusCode,
			Body:       a.Safe(string(raw)),
			Quota:      a.Quota,
		}
		if v, ok := resp.Header["Retry-After"]; ok && len(v) > 0 {
			e.RetryAfter = parseRetryAfter(v[0], now)
			e.RetryAfterRaw = a.Safe(v[0])
		}
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
			e.Location = a.Safe(RedactURL(loc))
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
func (c *Client) safe(s string) string { return SafeText(s, c.secretsNow()...) }

// secretsNow are the secrets the client sends with: the credentials' of
// the moment (a renewed token, a rotated file's), the token and the
// configured header values.
func (c *Client) secretsNow() []string {
	if c.authz != nil {
		return append(c.authz.Secrets(), c.secrets...)
	}
	return c.secrets
}

// Scrub returns s, text a third party holds or sent (a payload it gives
// back), with every form of the client's secrets replaced by [redacted]
// (redact.Scrub) and nothing else changed: no escape, no cut.
func (c *Client) Scrub(s string) string { return redact.Scrub(s, c.secretsNow()...) }

func (c *Client) scrub(s string) string { return c.Scrub(s) }

// textScrubber is an error whose text may quote a third party (a token
// endpoint's refusal): ScrubText rewrites it with scrub.
type textScrubber interface {
	ScrubText(scrub func(string) string)
}

// scrubChain scrubs every error of err's chain that can be (textScrubber),
// so errors.As finds no secret either.
func scrubChain(err error, scrub func(string) string) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ts, ok := e.(textScrubber); ok {
			ts.ScrubText(scrub)
		}
	}
}
