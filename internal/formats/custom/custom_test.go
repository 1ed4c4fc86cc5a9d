package custom_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty/thirdpartytest"
)

func batch() *thirdparty.Batch {
	return &thirdparty.Batch{Source: "orders", Time: time.Unix(1700000000, 0).UTC(), Items: []thirdparty.Item{
		{ID: "a/b c?#%é", Version: 3, Payload: json.RawMessage(`{"n":12345678901234567890,"z":1,"a":2}`)},
		{ID: "7", Version: 4, Deleted: true},
	}}
}

func TestBodyIsDeterministic(t *testing.T) {
	t.Parallel()
	f, err := custom.New(&custom.Config{Request: custom.Request{
		Body: `{t: now, env: env, ENV: $ENV, items: [.items[] | {id, n: .payload.n, keys: (.payload // {} | keys)}]}`,
	}})
	require.NoError(t, err)
	var first []byte
	for range 5 {
		reqs, err := f.Requests(batch())
		require.NoError(t, err)
		require.Len(t, reqs, 1)
		if first == nil {
			first = reqs[0].Body
		}
		require.Equal(t, string(first), string(reqs[0].Body))
	}
	require.JSONEq(t, `{"t":1700000000,"env":{},"ENV":{},"items":[{"id":"a/b c?#%é","n":12345678901234567890,"keys":["a","n","z"]},{"id":"7","n":null,"keys":[]}]}`, string(first))
}

func TestPerItemPathAndDeletes(t *testing.T) {
	t.Parallel()
	f, err := custom.New(&custom.Config{
		Request: custom.Request{Method: "PUT", Path: "/objects/{id}?v={version}", Body: ".payload", PerItem: true},
		Deletes: &custom.Request{Method: "DELETE"},
	})
	require.NoError(t, err)
	reqs, err := f.Requests(batch())
	require.NoError(t, err)
	require.Len(t, reqs, 2)
	require.Equal(t, "PUT", reqs[0].Method)
	require.Equal(t, "/objects/a%2Fb%20c%3F%23%25%C3%A9?v=3", reqs[0].Path)
	require.Equal(t, "DELETE", reqs[1].Method)
	require.Equal(t, "/objects/7?v=4", reqs[1].Path)
	require.Nil(t, reqs[1].Body)
}

// Issue 45: {source} in a path is the batch's source, escaped, batched
// or per item, so one destination serves several objects of one API.
func TestPathSource(t *testing.T) {
	t.Parallel()
	f, err := custom.New(&custom.Config{
		Request: custom.Request{Path: "/objects/{source}/batch", Body: "."},
		Deletes: &custom.Request{Method: "DELETE", Path: "/objects/{source}/{id}", PerItem: true},
	})
	require.NoError(t, err)
	b := batch()
	b.Source = "line items/{id}"
	reqs, err := f.Requests(b)
	require.NoError(t, err)
	require.Len(t, reqs, 2)
	require.Equal(t, "/objects/line%20items%2F%7Bid%7D/batch", reqs[0].Path)
	require.Equal(t, "/objects/line%20items%2F%7Bid%7D/7", reqs[1].Path, "a source holding {id} is not expanded again")
}

func TestCompileErrorNamesField(t *testing.T) {
	t.Parallel()
	_, err := custom.New(&custom.Config{Rejected: `[.body.errors[] |`})
	require.ErrorContains(t, err, "response.rejected")
	_, err = custom.New(&custom.Config{Request: custom.Request{Body: `{a: nosuchfn}`}})
	require.ErrorContains(t, err, "request.body")
}

func TestReadAcceptedAndRejected(t *testing.T) {
	t.Parallel()
	f, err := custom.New(&custom.Config{
		Accepted: `.status == 204 or .body.status == "COMPLETE"`,
		Rejected: `[.body.errors[]? | {id: .context.ids[0], error: .message}]`,
	})
	require.NoError(t, err)
	reqs, err := f.Requests(batch())
	require.NoError(t, err)
	answer := func(body string) *thirdparty.Answer {
		return thirdpartytest.Answer(207, http.Header{}, []byte(body))
	}
	res, err := f.Read(&reqs[0], answer(`{"status":"COMPLETE","errors":[{"context":{"ids":["7"]},"message":"no such contact"}]}`))
	require.NoError(t, err)
	require.Equal(t, []thirdparty.Rejection{{ID: "7", Error: "no such contact"}}, res.Rejected)

	_, err = f.Read(&reqs[0], answer(`{"status":"PENDING"}`))
	require.ErrorContains(t, err, "response.accepted")
	_, err = f.Read(&reqs[0], answer(`{"status":"COMPLETE","errors":[{"context":{"ids":["99"]},"message":"x"}]}`))
	require.ErrorContains(t, err, "not in the request")
	_, err = f.Read(&reqs[0], answer(`<html>`))
	require.Error(t, err)
}
