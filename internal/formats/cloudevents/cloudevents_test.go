package cloudevents_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats/cloudevents"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty/thirdpartytest"
)

// TestBatchOfStructuredEvents pins the body: the contract's attributes,
// the key and version as the id, the batch's recorded time, no data on a
// tombstone.
func TestBatchOfStructuredEvents(t *testing.T) {
	t.Parallel()
	f, err := cloudevents.New(&cloudevents.Config{Installation: "inst"})
	require.NoError(t, err)
	b := &thirdparty.Batch{Source: "orders", Time: time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC), Items: []thirdparty.Item{
		{ID: "a/b", Version: 3, Payload: json.RawMessage(`{"x": 1}`)}, {ID: "7", Version: 4, Deleted: true},
	}}
	reqs, err := f.Requests(b)
	require.NoError(t, err)
	require.Len(t, reqs, 1)
	require.Equal(t, "application/cloudevents-batch+json", reqs[0].ContentType)
	require.Equal(t, `[{"specversion":"1.0","id":"a/b:3","source":"urn:syncer:inst:orders","type":"syncer.orders.upserted","subject":"a/b","time":"2026-11-24T13:00:00Z","datacontenttype":"application/json","data":{"x": 1}},`+
		`{"specversion":"1.0","id":"7:4","source":"urn:syncer:inst:orders","type":"syncer.orders.deleted","subject":"7","time":"2026-11-24T13:00:00Z"}]`, string(reqs[0].Body))

	g, err := cloudevents.New(&cloudevents.Config{EventSource: "https://shop.example.com", EventTypePrefix: "com.example.order"})
	require.NoError(t, err)
	reqs, err = g.Requests(b)
	require.NoError(t, err)
	require.Contains(t, string(reqs[0].Body), `"source":"https://shop.example.com","type":"com.example.order.upserted"`)

	res, err := f.Read(&reqs[0], thirdpartytest.Answer(202, http.Header{}, nil))
	require.NoError(t, err)
	require.Empty(t, res.Rejected)
	_, err = f.Read(&reqs[0], thirdpartytest.Answer(400, http.Header{}, []byte("bad event")))
	require.Equal(t, thirdparty.ClassBatchRefused, thirdparty.Classify(err), "a 400 splits the batch")
}
