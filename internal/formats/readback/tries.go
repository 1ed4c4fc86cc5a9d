package readback

import (
	"cmp"
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

// LookupRetriesDefault is how often a lookup answered 429, 5xx or not at
// all is tried again before the run gives up (exit 1, resumable).
const LookupRetriesDefault = 5

// Tries is how a reader sends a lookup again after a transient failure.
// The zero value is ready to use.
type Tries struct {
	// Retries is how often a transient failure is tried again. Defaults to
	// LookupRetriesDefault.
	Retries int
	// Sleep waits between tries. Defaults to a context-aware sleep.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Answer is a lookup's 2xx answer.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	// Safe strips the destination's secrets from a text that may quote
	// the answer (a program's error).
	Safe func(string) string
}

// PostIDs posts {"ids": ids} to path, as the syncer and elasticsearch
// readers ask, and returns the answer's body.
func (t Tries) PostIDs(ctx context.Context, c Sender, path string, ids []string) ([]byte, error) {
	body, err := json.Marshal(struct {
		IDs []string `json:"ids"`
	}{ids})
	if err != nil {
		return nil, err
	}
	a, err := t.Send(ctx, c, &thirdparty.Request{Method: http.MethodPost, Path: path, ContentType: "application/json", Body: body, IDs: ids})
	if err != nil {
		return nil, err
	}
	return a.Body, nil
}

// Send sends r until a 2xx answer, an answer that is not worth another
// try (401/403, a redirect, 404, a 4xx) or the tries are spent, honouring
// Retry-After, and returns the 2xx answer. Its key (the Idempotency-Key
// the client always sends) is the body's digest: a read has nothing to
// deduplicate, and the same lookup carries the same key.
func (t Tries) Send(ctx context.Context, c Sender, r *thirdparty.Request) (*Answer, error) {
	if c == nil {
		return nil, errors.New("verify: reader has no client")
	}
	retries := cmp.Or(t.Retries, LookupRetriesDefault)
	sleep := t.Sleep
	if sleep == nil {
		sleep = Sleep
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
		var got *Answer
		_, err := c.Send(ctx, key, r, func(a *thirdparty.Answer) (*thirdparty.Result, error) {
			if e := a.Refusal(); e != nil {
				return nil, e
			}
			got = &Answer{Status: a.StatusCode, Header: a.Header, Body: a.Body, Safe: a.Safe}
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

// Sleep waits d, or until ctx ends (its error then): Tries' default.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
