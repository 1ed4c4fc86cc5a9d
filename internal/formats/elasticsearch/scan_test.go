package elasticsearch

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScanAnswerAgreesWithEncodingJSON: whatever the fast path takes, it
// reads as encoding/json does; what it refuses, Read hands to
// encoding/json.
func TestScanAnswerAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"took":3,"errors":false,"items":[{"index":{"_index":"o","_id":"1","_version":2,"result":"created","_shards":{"total":2,"successful":1,"failed":0},"_seq_no":0,"_primary_term":1,"status":201}}]}`,
		`{"items":[{"delete":{"_id":"a\"b\\u00e9","status":404,"result":"not_found"}},{"index":{"_id":"2","status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse [x]","caused_by":{"type":"x","reason":null}}}}]}`,
		` { "items" : [ { "index" : { "_id" : "1" , "status" : 409 , "error" : null } } ] , "extra": [1, -2.5e3, true, false, null, {}] } `,
		`{"items":[{"index":{"_id":"1","status":201},"index":{"_id":"2","status":500}}]}`,
		`{"items":[{"create":{"_id":"1","status":201}}]}`,
		`{"items":[]}`,
		`{}`,
		`{"items":[{"index":{"_id":"1","status":201.0}}]}`,
		`{"items":[{"index":{"_id":null,"status":201}}]}`,
		`{"items":[{"index":{"_id":"1","status":201}}]} trailing`,
		`<html>`,
		`{"items":[{"index":{"_id":"1","status":201,"error":"text"}}]}`,
	} {
		fast, ferr := scanAnswer([]byte(body))
		var slow answer
		serr := json.Unmarshal([]byte(body), &slow)
		if ferr == nil {
			require.NoError(t, serr, body)
			if len(slow.Items) == 0 {
				slow.Items = nil // [] and absent read alike
			}
			require.Equal(t, slow, fast, body)
		}
	}
}
