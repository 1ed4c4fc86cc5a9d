package custom

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
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

	big, err := New(&Config{Request: Request{Body: `[range(100000)]`}, MaxBodyBytes: 1000})
	require.NoError(t, err)
	_, err = big.Requests(batch(`{}`))
	require.True(t, errors.As(err, &pe))
	require.Contains(t, err.Error(), "byte limit")
}
