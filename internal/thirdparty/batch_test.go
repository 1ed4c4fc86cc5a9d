package thirdparty_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestBatchRoundTrip(t *testing.T) {
	t.Parallel()
	its := []thirdparty.Item{
		{ID: "42", Version: 3, Payload: json.RawMessage(`{"a": 1, "big": 123456789012345678901234567890}`)},
		{ID: "43", Version: 7, Deleted: true},
		{ID: "9223372036854775807", Version: 1, Payload: json.RawMessage(`"text \"quoted\" \u00e9"`)},
		{ID: "-5", Version: 2, Payload: json.RawMessage(`[1, 2.50, null]`)},
		{ID: "44", Version: 1},
		{ID: "45", Version: 9, Deleted: true},
	}
	body := thirdparty.AppendBatch(nil, its)
	got, err := thirdparty.DecodeBatch(body)
	require.NoError(t, err)
	again := thirdparty.AppendBatch(nil, got)
	require.Equal(t, string(body), string(again))
	require.True(t, got[1].Deleted)
	require.Empty(t, got[1].Payload)
	require.JSONEq(t, `"text \"quoted\" é"`, string(got[2].Payload))
	require.Equal(t, `{"a": 1, "big": 123456789012345678901234567890}`, string(got[0].Payload), "payloads stay raw")
}

// Keys of sources (text, uuid, a number padded or beyond int64) travel as
// their text, escaped, and come back byte for byte, as any id does.
func TestBatchRoundTripKeys(t *testing.T) {
	t.Parallel()
	its := []thirdparty.Item{
		{ID: "0e4f2c1a-3b7d-4c55-9e2a-111111111111", Version: 3, Payload: json.RawMessage(`{"a":1}`)},
		{ID: "01", Version: 4, Deleted: true},
		{ID: "quote \" \\ é \u2028 <>&\n", Version: 5, Payload: json.RawMessage(`null`)},
		{ID: "99999999999999999999", Version: 6, Payload: json.RawMessage(`1`)},
		{ID: "-", Version: 7, Payload: json.RawMessage(`2`)},
		{ID: "42", Version: 8, Payload: json.RawMessage(`3`)},
	}
	body := thirdparty.AppendBatch(nil, its)
	require.Equal(t, body, thirdparty.AppendBatch(nil, its), "deterministic")
	got, err := thirdparty.DecodeBatch(body)
	require.NoError(t, err)
	require.Equal(t, its, got)
	require.Equal(t, string(body), string(thirdparty.AppendBatch(nil, got)))
	var w struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(body, &w))
	for i, it := range its {
		require.Equal(t, it.ID, w.Items[i].ID)
	}
	require.Equal(t, "42", its[5].ID)
}

func TestDecodeBatchStrict(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"not json":          `nope`,
		"unknown field":     `{"items":[{"id":"1","version":1,"payload":1,"extra":2}]}`,
		"tombstone payload": `{"items":[{"id":"1","version":1,"payload":1,"deleted":true}]}`,
		"deleted false":     `{"items":[{"id":"1","version":1,"payload":1,"deleted":false}]}`,
		"spacing":           `{"items": [{"id":"1","version":1,"payload":1}]}`,
		"id empty":          `{"items":[{"id":"","version":1,"payload":1}]}`,
		"id number":         `{"items":[{"id":1,"version":1,"payload":1}]}`,
		"field order":       `{"items":[{"version":1,"id":"1","payload":1}]}`,
		"trailing data":     `{"items":[{"id":"1","version":1,"payload":1}]}{}`,
		"trailing newline":  "{\"items\":[{\"id\":\"1\",\"version\":1,\"payload\":1}]}\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := thirdparty.DecodeBatch([]byte(body))
			require.ErrorContains(t, err, "thirdparty: decode batch")
		})
	}
}

// batchKeyGolden is SHA-256("syncer idempotency key v2\x00" ||
// be64(len(inst)) || inst || be64(len(salt)) || salt || body), computed
// outside Go for inst "inst-1", salt "" and the body below.
const batchKeyGolden = "syncer-e04586c54a9c56cd586a808300fd7b36f75d3f68bac5f201059f768b2e16b613"

func TestBatchKey(t *testing.T) {
	t.Parallel()
	body := []byte(`{"items":[{"id":"42","version":3,"payload":{"a":1}}]}`)
	key := thirdparty.BatchKey("inst-1", "", body)
	require.Equal(t, batchKeyGolden, key, "the key must not change between releases")
	require.True(t, strings.HasPrefix(key, "syncer-"))

	other := []byte(`{"items":[{"id":"42","version":3,"payload":{"a":2}}]}`)
	seen := map[string]string{key: "base"}
	for name, k := range map[string]string{
		"other installation": thirdparty.BatchKey("inst-2", "", body),
		"salt":               thirdparty.BatchKey("inst-1", "replay-1", body),
		"other payload":      thirdparty.BatchKey("inst-1", "", other),
		// Length prefixes keep the parts apart.
		"shifted boundary": thirdparty.BatchKey("inst-", "1", body),
	} {
		require.NotContains(t, seen, k, "%s collides with %s", name, seen[k])
		seen[k] = name
	}
}

// TestRequestKey: a request's key is BatchKey of "METHOD path\n" and its
// body, as it was when it was made by concatenating them; the goldens were
// computed by that concatenation, so a key sent before an upgrade is sent
// again after it.
func TestRequestKey(t *testing.T) {
	t.Parallel()
	const inst = "6f1c0f2e-7d55-4e7b-9a1e-4b1f3c2d9e10"
	require.Equal(t, "syncer-34237fabd9893986493f5a64a067a6594062ac0fe4a1a55dc4c96260a7da5b2e",
		thirdparty.RequestKey(inst, "replay:7", "POST", "/hooks/a%2Fb", []byte(`{"id":"a/b"}`)))
	require.Equal(t, "syncer-69788cdb6669224ed981aa22c4b33136319fa3e84be30c68b662ecae312317c9",
		thirdparty.RequestKey("inst", "s", "DELETE", "/objects/42", nil))
	long := strings.Repeat("p", 1000) // past the stack buffer
	require.Equal(t, thirdparty.BatchKey(inst, "", []byte("PUT "+long+"\n{}")), thirdparty.RequestKey(inst, "", "PUT", long, []byte("{}")))
}

func TestAppendStringIsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "42", "a/b c?#%", "bö", "<&>", "a\"b\\c", "\x00\x1f", "\u2028", "\xff"} {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(thirdparty.AppendString(nil, s)), "%q", s)
	}
}

// An item's id is written as encoding/json writes it, whether in place (a
// composite key's JSON array: quotes, backslashes) or through json.Marshal.
func TestBatchIDIsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"42", `["tenant-3",5000]`, `["a,b",3]`, `["a\"b\\c",1]`, `\`, `"`, `""`,
		`["<&>",1]`, "[\"bö\",2]", "\u2028", "\x00\x1f", "\xff", "a\"b\x7f"} {
		want, err := json.Marshal(id)
		require.NoError(t, err)
		body := thirdparty.AppendBatch(nil, []thirdparty.Item{{ID: id, Version: 1, Deleted: true}})
		require.Equal(t, `{"items":[{"id":`+string(want)+`,"version":1,"deleted":true}]}`, string(body), "%q", id)
	}
}

// AppendBatchShared writes AppendBatch's bytes and leaves each payload a
// slice of the body, which an append to cannot overwrite.
func TestAppendBatchShared(t *testing.T) {
	t.Parallel()
	its := []thirdparty.Item{
		{ID: "1", Version: 1, Payload: json.RawMessage(`{"a":1}`)},
		{ID: "2", Version: 2, Deleted: true},
		{ID: "x\"y", Version: 3, Payload: json.RawMessage(`[1,2,3]`)},
		{ID: "4", Version: 4},
	}
	want := thirdparty.AppendBatch(nil, its)
	got := thirdparty.AppendBatchShared(nil, its)
	require.Equal(t, string(want), string(got))
	require.JSONEq(t, `{"a":1}`, string(its[0].Payload))
	require.JSONEq(t, `[1,2,3]`, string(its[2].Payload))
	require.Nil(t, its[1].Payload)
	require.Nil(t, its[3].Payload)
	for _, i := range []int{0, 2} {
		p := its[i].Payload
		require.Equal(t, len(p), cap(p), "capacity ends with the payload")
		require.True(t, &got[strings.Index(string(got), string(p))] == &p[0], "payload %d is in the body", i)
	}
	_ = append(its[0].Payload, 'x')
	require.Equal(t, string(want), string(got), "an append copies")
	require.Equal(t, string(want), string(thirdparty.AppendBatch(nil, its)), "the items encode as before")
}
