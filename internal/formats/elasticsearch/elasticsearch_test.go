package elasticsearch_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats/elasticsearch"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty/thirdpartytest"
)

func TestRequestIsBulkNDJSON(t *testing.T) {
	t.Parallel()
	r := elasticsearch.Request([]thirdparty.Item{{ID: "a\"b", Version: 3, Payload: json.RawMessage(`{"x":1}`)}, {ID: "7", Version: 4, Deleted: true}})
	require.Equal(t, "/_bulk", r.Path)
	require.Equal(t, "application/x-ndjson", r.ContentType)
	require.Equal(t, `{"index":{"_id":"a\"b","version":3,"version_type":"external"}}`+"\n"+`{"x":1}`+"\n"+
		`{"delete":{"_id":"7","version":4,"version_type":"external"}}`+"\n", string(r.Body))
}

// TestReadItemByItem: every item status the contract names, and answers
// that are not answers.
func TestReadItemByItem(t *testing.T) {
	t.Parallel()
	items := []thirdparty.Item{
		{ID: "1", Version: 1, Payload: json.RawMessage(`{}`)}, {ID: "2", Version: 1, Payload: json.RawMessage(`{}`)},
		{ID: "3", Version: 1, Deleted: true}, {ID: "4", Version: 1, Payload: json.RawMessage(`{}`)},
		{ID: "5", Version: 1, Payload: json.RawMessage(`{}`)}, {ID: "6", Version: 1, Payload: json.RawMessage(`{}`)},
		{ID: "7", Version: 1, Payload: json.RawMessage(`{}`)},
	}
	r := elasticsearch.Request(items)
	f := elasticsearch.Format{}
	res, err := f.Read(&r, thirdpartytest.Answer(200, http.Header{}, []byte(`{"errors":true,"items":[
		{"index":{"_id":"1","status":201}}, {"index":{"_id":"2","status":409}}, {"delete":{"_id":"3","status":404}},
		{"index":{"_id":"4","status":404,"error":{"type":"index_not_found_exception","reason":"no such index"}}},
		{"index":{"_id":"5","status":429}}, {"index":{"_id":"6","status":503}},
		{"index":{"_id":"7","status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse field [n]"}}}]}`)))
	require.NoError(t, err)
	require.Equal(t, []string{"5", "6"}, res.Pending)
	require.Equal(t, []thirdparty.Rejection{
		{ID: "4", Error: "404 index_not_found_exception: no such index"},
		{ID: "7", Error: "400 mapper_parsing_exception: failed to parse field [n]"},
	}, res.Rejected)

	for name, body := range map[string]string{
		"one short":      `{"items":[{"index":{"_id":"1","status":201}}]}`,
		"html":           `<html>`,
		"wrong action":   `{"items":[{"create":{"_id":"1","status":201}},{"index":{"_id":"2","status":201}}]}`,
		"both actions":   `{"items":[{"index":{"_id":"1","status":201},"delete":{"_id":"1","status":200}},{"index":{"_id":"2","status":201}}]}`,
		"swapped ids":    `{"items":[{"index":{"_id":"2","status":201}},{"index":{"_id":"1","status":201}}]}`,
		"missing status": `{"items":[{"index":{"_id":"1"}},{"index":{"_id":"2","status":201}}]}`,
		"one too many":   `{"items":[{"index":{"_id":"1","status":201}},{"index":{"_id":"2","status":201}},{"index":{"_id":"3","status":201}}]}`,
	} {
		one := elasticsearch.Request(items[:2])
		_, err := f.Read(&one, thirdpartytest.Answer(200, http.Header{}, []byte(body)))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e, name)
		require.NotEmpty(t, e.BadAnswer, name)
	}
}
