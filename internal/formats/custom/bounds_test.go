package custom

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty/thirdpartytest"
)

// A request program that fails on one row's data, or never ends on it,
// fails as a *ProgramError within its bound, and the same program renders
// the other rows.
func TestProgramBounds(t *testing.T) {
	t.Parallel()
	f, err := New(&Config{Request: Request{Body: `{rows: [.items[] | if .payload.loop then (def f: f + 1; f) else {id, total: (.payload.total | tonumber)} end]}`},
		ProgramTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	batch := func(payloads ...string) *thirdparty.Batch {
		b := &thirdparty.Batch{Source: "orders", Time: time.Now()}
		for i, p := range payloads {
			b.Items = append(b.Items, thirdparty.Item{ID: string(rune('a' + i)), Version: 1, Payload: json.RawMessage(p)})
		}
		return b
	}
	_, err = f.Requests(batch(`{"total": "12"}`, `{"total": "13"}`))
	require.NoError(t, err)
	_, err = f.Requests(batch(`{"total": "12"}`, `{"total": "abc"}`))
	var pe *ProgramError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Contains(t, err.Error(), "request.body")
	start := time.Now()
	_, err = f.Requests(batch(`{"loop": true}`))
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Contains(t, err.Error(), "program_timeout")
	require.Less(t, time.Since(start), 5*time.Second)

	// A time bound far off: under load and the race detector, building
	// the list may take a second, and this is about the bytes.
	big, err := New(&Config{Request: Request{Body: `[range(100000)]`}, MaxBodyBytes: 1000, ProgramTimeout: time.Minute})
	require.NoError(t, err)
	_, err = big.Requests(batch(`{}`))
	require.True(t, errors.As(err, &pe))
	require.Contains(t, err.Error(), "byte limit")
}

// Response programs are bounded as request programs are: one that never
// ends, or builds what the third party asks it to (n values), makes the
// answer no answer within its bound, and the run ends.
func TestResponseProgramBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		body string
		want string
	}{
		{"accepted loops", Config{Accepted: `last(range(1e11)) >= 0`}, `{}`, "program_timeout"},
		{"the third party picks n", Config{Accepted: `[range(.body.n)] | length > 0`}, `{"n": 1e9}`, "bound"},
		{"rejected loops", Config{Rejected: `[repeat(1)] | []`}, `{}`, "response.rejected"},
		{"refused loops", Config{Refused: `def f: f + 1; f`}, `{}`, "response.refused"},
		{"retry loops", Config{Retry: `last(range(1e11)) == 0`}, `{}`, "response.retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.ProgramTimeout = 200 * time.Millisecond
			f, err := New(&tt.cfg)
			require.NoError(t, err)
			reqs, err := f.Requests(&thirdparty.Batch{Source: "orders", Time: time.Now(),
				Items: []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{}`)}}})
			require.NoError(t, err)
			within(t, 5*time.Second, func() {
				_, err = f.Read(&reqs[0], thirdpartytest.Answer(200, http.Header{}, []byte(tt.body)))
			})
			var tpErr *thirdparty.Error
			require.ErrorAs(t, err, &tpErr)
			require.True(t, tpErr.Transient(), "not an answer is retried: %v", err)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// A deletes program is bounded as the request program is.
func TestDeletesProgramBound(t *testing.T) {
	t.Parallel()
	f, err := New(&Config{Request: Request{Body: `{rows: [.items[] | .id]}`},
		Deletes: &Request{Path: "/archive", Body: `{ids: [.items[] | .id], n: last(range(1e11))}`}, ProgramTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	_, err = f.Requests(&thirdparty.Batch{Source: "orders", Time: time.Now(),
		Items: []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{}`)}, {ID: "2", Version: 2, Deleted: true}}})
	require.Less(t, time.Since(start), 5*time.Second)
	var pe *ProgramError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "deletes.body", pe.Field)
	require.ErrorContains(t, err, "program_timeout")
}

// The memory bound stops a program that builds more than it may, long
// before its time bound, request and response programs alike.
func TestProgramMemoryBound(t *testing.T) {
	t.Parallel()
	f, err := New(&Config{Request: Request{Body: `[range(1e9)] | length`}, Accepted: `[range(.body.n) | tostring] | length > 0`,
		ProgramTimeout: time.Minute, ProgramMemory: 8 << 20})
	require.NoError(t, err)
	b := &thirdparty.Batch{Source: "orders", Time: time.Now(), Items: []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{}`)}}}
	within(t, 20*time.Second, func() { _, err = f.Requests(b) })
	var pe *ProgramError
	require.ErrorAs(t, err, &pe)
	require.ErrorContains(t, err, "allocated past its bound of 8 MiB")

	ok, err := New(&Config{Accepted: `[range(.body.n) | tostring] | length > 0`, ProgramTimeout: time.Minute, ProgramMemory: 8 << 20})
	require.NoError(t, err)
	reqs, err := ok.Requests(b)
	require.NoError(t, err)
	within(t, 20*time.Second, func() {
		_, err = ok.Read(&reqs[0], thirdpartytest.Answer(200, http.Header{}, []byte(`{"n": 1e9}`)))
	})
	require.ErrorContains(t, err, "response.accepted: allocated past its bound")
	_, err = ok.Read(&reqs[0], thirdpartytest.Answer(200, http.Header{}, []byte(`{"n": 10}`)))
	require.NoError(t, err)
}

// within runs f and fails the test at once if it has not returned after
// d: an unbounded program would otherwise hang the test until its
// deadline.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still running after %s", d)
	}
}
