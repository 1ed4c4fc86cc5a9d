package tenants

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sync"
)

// An endpoint that rotates the refresh token has spent the old one as soon
// as it answers, whether or not its answer is one the OAuth2 client takes:
// golang.org/x/oauth2 refuses a 200 without an access_token ("server
// response missing access_token") and drops the refresh_token the answer
// carried, and the next grant would spend the old token again, which an
// endpoint that revokes the family on reuse (Auth0, Okta) answers by
// refusing the tenant for good. So the grant reads the refresh_token out
// of every 2xx answer itself, before the client judges it.

// maxTokenAnswer is what the grant reads of an answer: as much as
// golang.org/x/oauth2 reads.
const maxTokenAnswer = 1 << 20

// rotatedReader is the transport of one grant's asks: it passes each
// request on, and keeps the refresh_token of a 2xx answer.
type rotatedReader struct {
	base http.RoundTripper

	mu      sync.Mutex
	refresh string
	ok      bool // a 2xx answer came
}

func (t *rotatedReader) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, err
	}
	t.mu.Lock()
	t.ok = true
	t.mu.Unlock()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenAnswer))
	_ = resp.Body.Close()
	if err != nil {
		// The client reads the same failure and reports it; nothing
		// whole was read to keep.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if refresh := answeredRefresh(resp.Header.Get("Content-Type"), body); refresh != "" {
		t.mu.Lock()
		t.refresh = refresh
		t.mu.Unlock()
	}
	return resp, nil
}

// answered is the refresh_token of the last 2xx answer, "" for none, and
// whether a 2xx answer came.
func (t *rotatedReader) answered() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refresh, t.ok
}

// answeredRefresh is the refresh_token of a token endpoint's answer, read
// as golang.org/x/oauth2 reads it: a form for the form and text types,
// JSON otherwise.
func answeredRefresh(contentType string, body []byte) string {
	content, _, _ := mime.ParseMediaType(contentType)
	switch content {
	case "application/x-www-form-urlencoded", "text/plain":
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return ""
		}
		return vals.Get("refresh_token")
	}
	var answer struct {
		RefreshToken string `json:"refresh_token"`
	}
	if json.Unmarshal(body, &answer) != nil {
		return ""
	}
	return answer.RefreshToken
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
