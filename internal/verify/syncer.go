package verify

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// LookupRetriesDefault is how often a lookup answered 429, 5xx or not at
// all is tried again before the run gives up (exit 1, resumable).
const LookupRetriesDefault = 5

// SyncerReader reads a destination of the syncer format:
// POST {URL}/v1/lookup with {"ids": [...]}, answered
// {"items": [{"id", "version", "payload"} or {"id", "version", "deleted": true}]}.
// An id left out is absent there; an item with neither payload nor
// deleted (an "error" for that id) is unknown.
type SyncerReader struct {
	// URL is the destination's base URL.
	URL string
	// Token is the bearer token; empty sends none. Never logged or shown.
	Token string
	// Client sends the requests. Defaults to a client with a 30s timeout.
	Client *http.Client
	// Retries is how often a transient failure is tried again. Defaults to
	// LookupRetriesDefault.
	Retries int
	// Sleep waits between tries. Defaults to a context-aware sleep.
	Sleep func(ctx context.Context, d time.Duration) error
}

var _ Reader = (*SyncerReader)(nil)

type lookupAnswer struct {
	Items []struct {
		ID      json.RawMessage `json:"id"`
		Version int64           `json:"version"`
		Payload json.RawMessage `json:"payload"`
		Deleted bool            `json:"deleted"`
	} `json:"items"`
}

// Lookup asks for ids in one request.
func (r *SyncerReader) Lookup(ctx context.Context, ids []string) (map[string]There, error) {
	raw, err := postIDs(ctx, r.Client, strings.TrimSuffix(r.URL, "/")+"/v1/lookup", r.Token, cmp.Or(r.Retries, LookupRetriesDefault), r.Sleep, ids)
	if err != nil {
		return nil, err
	}
	var ans lookupAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("lookup answer: %w", err)
	}
	out := make(map[string]There, len(ans.Items))
	for _, it := range ans.Items {
		id := idText(it.ID)
		t := There{Version: it.Version, Deleted: it.Deleted}
		if !it.Deleted {
			if len(it.Payload) == 0 {
				t.Unknown = true
			} else {
				t.Payload = it.Payload
			}
		}
		out[id] = t
	}
	return out, nil
}

// idText is an id as a string: a JSON string's text, or a number's digits
// for a third party that answers ids as numbers.
func idText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}

// postIDs posts {"ids": ids} to url, with token as a bearer token if set,
// retrying as retrying does, and returns the answer's body: the one
// request both readers make.
func postIDs(ctx context.Context, c *http.Client, url, token string, retries int, sleep func(context.Context, time.Duration) error, ids []string) ([]byte, error) {
	body, err := json.Marshal(struct {
		IDs []string `json:"ids"`
	}{ids})
	if err != nil {
		return nil, err
	}
	return retrying(ctx, retries, sleep, func() (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return client(c).Do(req)
	})
}

func client(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	// A redirect is answered as it is, a configuration error, as in the
	// export: the token only ever goes to the configured origin.
	return &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// StatusError is a lookup answered with a status that is not 2xx.
type StatusError struct {
	Status int
	// Body is the start of the answer, for the message.
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("lookup answered %d: %s", e.Status, e.Body)
}

// transient reports whether a status is worth another try.
func transient(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500
}

// retrying sends until a 2xx answer, a status that is not transient or
// the tries are spent, honouring Retry-After in seconds, and returns the
// answer's body. Redirects are not followed: like the export, a 3xx is a
// configuration error.
func retrying(ctx context.Context, retries int, sleep func(context.Context, time.Duration) error, send func() (*http.Response, error)) ([]byte, error) {
	if sleep == nil {
		sleep = sleepCtx
	}
	wait := 200 * time.Millisecond
	var last error
	for try := 0; try <= retries; try++ {
		if try > 0 {
			if err := sleep(ctx, wait); err != nil {
				return nil, err
			}
			wait = min(wait*2, 10*time.Second)
		}
		resp, err := send()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			last = err
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if resp.StatusCode/100 == 2 && err == nil {
			return raw, nil
		}
		if err != nil {
			last = err
			continue
		}
		se := &StatusError{Status: resp.StatusCode, Body: oneLine(raw)}
		if !transient(resp.StatusCode) {
			return nil, se
		}
		last = se
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = min(time.Duration(s)*time.Second, time.Minute)
		}
	}
	return nil, fmt.Errorf("gave up after %d tries: %w", retries+1, last)
}

func oneLine(raw []byte) string {
	s := strings.Join(strings.Fields(string(raw)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ErrNoReadAPI is returned by NewReader for a format the contract gives no
// read API.
var ErrNoReadAPI = errors.New("has no read API")
