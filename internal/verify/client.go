package verify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Sender sends one request to a destination: a *thirdparty.Client, the
// client the daemons send with, so a lookup carries the destination's own
// credentials (a bearer token, basic auth, an OAuth2 token renewed after a
// 401), its headers and its TLS, follows no redirect, and every text of an
// error is already stripped of those secrets.
type Sender interface {
	Send(ctx context.Context, key string, r *thirdparty.Request, read func(*thirdparty.Answer) (*thirdparty.Result, error)) (*thirdparty.Result, error)
}

var _ Sender = (*thirdparty.Client)(nil)

// NewClient returns a client of url with a bearer token (empty: none),
// for a destination the SYNCER_THIRDPARTY_* settings configure.
func NewClient(url, token string) (*thirdparty.Client, error) {
	return thirdparty.New(&thirdparty.Config{URL: url, Token: token, Timeout: LookupTimeoutDefault})
}

// LookupTimeoutDefault bounds one lookup, from sending to the whole
// answer: an answer of 500 documents is larger than a batch's.
const LookupTimeoutDefault = 30 * time.Second

// answer is a lookup's 2xx answer.
type answer struct {
	status int
	header http.Header
	body   []byte
	// safe strips the destination's secrets from a text that may quote
	// the answer (a program's error).
	safe func(string) string
}

// postIDs posts {"ids": ids} to path, as the syncer and elasticsearch
// readers ask, and returns the answer's body.
func postIDs(ctx context.Context, c Sender, path string, retries int, sleep func(context.Context, time.Duration) error, ids []string) ([]byte, error) {
	body, err := json.Marshal(struct {
		IDs []string `json:"ids"`
	}{ids})
	if err != nil {
		return nil, err
	}
	a, err := send(ctx, c, &thirdparty.Request{Method: http.MethodPost, Path: path, ContentType: "application/json", Body: body, IDs: ids}, retries, sleep)
	if err != nil {
		return nil, err
	}
	return a.body, nil
}

// send sends r until a 2xx answer, an answer that is not worth another
// try (401/403, a redirect, 404, a 4xx) or the tries are spent, honouring
// Retry-After, and returns the 2xx answer. Its key (the Idempotency-Key
// the client always sends) is the body's digest: a read has nothing to
// deduplicate, and the same lookup carries the same key.
func send(ctx context.Context, c Sender, r *thirdparty.Request, retries int, sleep func(context.Context, time.Duration) error) (*answer, error) {
	if c == nil {
		return nil, errors.New("verify: reader has no client")
	}
	if sleep == nil {
		sleep = sleepCtx
	}
	sum := sha256.Sum256(append([]byte(r.Method+" "+r.Path+"\n"), r.Body...))
	key := "verify-" + hex.EncodeToString(sum[:12])
	wait := 200 * time.Millisecond
	var last error
	for try := 0; try <= retries; try++ {
		if try > 0 {
			if err := sleep(ctx, wait); err != nil {
				return nil, err
			}
			wait = min(wait*2, 10*time.Second)
		}
		var got *answer
		_, err := c.Send(ctx, key, r, func(a *thirdparty.Answer) (*thirdparty.Result, error) {
			if e := a.Refusal(); e != nil {
				return nil, e
			}
			got = &answer{status: a.StatusCode, header: a.Header, body: a.Body, safe: a.Safe}
			return &thirdparty.Result{}, nil
		})
		if err == nil {
			return got, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var te *thirdparty.Error
		if !errors.As(err, &te) || !(te.RateLimited() || te.Transient()) {
			return nil, err
		}
		last = err
		if te.RetryAfter > 0 {
			wait = min(te.RetryAfter, time.Minute)
		}
	}
	return nil, fmt.Errorf("gave up after %d tries: %w", retries+1, last)
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
