package thirdparty

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// maxResultBody bounds how much of a 2xx body is read: a results list for
// thousands of items fits many times over, a runaway server does not. A
// body longer than this is not an acceptance (see readAnswer).
const maxResultBody = 16 << 20

// decodeResult reads a 2xx body and says which items it rejects, or, in
// bad, why the body is not an answer at all.
//
// Acceptance must be positive: only a body that is empty (or whitespace) or
// parses as the contract's results counts. Anything else (an HTML page from
// a proxy, a truncated or malformed JSON, a status word the contract does
// not have, an id that is not in the batch or comes twice) means whoever
// answered is not the third party speaking the contract, or is not saying
// what it did with the items; taking that as "all accepted" would mark rows
// synced that nobody stored. The caller retries such a batch under the same
// key instead, which a key-honouring third party answers from its cache.
//
// `{}` and any object without "results" (or with "results": null, what a Go
// server sends for a nil slice) count as "all accepted": the contract says
// the body may carry results and that an item missing from them is
// accepted, and many APIs answer a plain `{}` or `{"ok":true}`. What cannot
// be mistaken for it is a body that is not a JSON object.
func decodeResult(raw []byte, ids []string, safe func(string) string) (res *Result, bad string) {
	res = &Result{}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return res, ""
	}
	if trimmed[0] != '{' {
		if trimmed[0] == '<' {
			return nil, "answer is not JSON (it looks like HTML)"
		}
		return nil, "answer is not a JSON object"
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil {
		return nil, "answer is not valid JSON: " + safe(err.Error())
	}
	rawResults, ok := top["results"]
	if !ok || string(rawResults) == "null" {
		return res, ""
	}
	var results []json.RawMessage
	if err := json.Unmarshal(rawResults, &results); err != nil {
		return nil, `"results" is not an array`
	}
	if len(results) == 0 {
		return res, ""
	}
	// seen maps each id of the batch to whether a result named it.
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		seen[id] = false
	}
	for i, r := range results {
		var entry struct {
			ID     json.RawMessage `json:"id"`
			Status json.RawMessage `json:"status"`
			Error  json.RawMessage `json:"error"`
		}
		if len(bytes.TrimSpace(r)) == 0 || bytes.TrimSpace(r)[0] != '{' || json.Unmarshal(r, &entry) != nil {
			return nil, fmt.Sprintf("result %d is not an object", i)
		}
		if len(entry.ID) == 0 {
			return nil, fmt.Sprintf("result %d has no id", i)
		}
		id, ok := resultID(entry.ID)
		if !ok {
			return nil, fmt.Sprintf("result %d: id %s is neither a string nor an integer", i, safe(string(entry.ID)))
		}
		named, inBatch := seen[id]
		switch {
		case !inBatch:
			return nil, fmt.Sprintf("result %d: id %s is not in the batch", i, safe(strconv.Quote(id)))
		case named:
			return nil, fmt.Sprintf("result %d: id %s is named twice", i, safe(strconv.Quote(id)))
		}
		seen[id] = true
		var status string
		if json.Unmarshal(entry.Status, &status) != nil {
			return nil, fmt.Sprintf("result %d: status %s is not a string", i, safe(string(entry.Status)))
		}
		switch status {
		case "accepted":
		case "rejected":
			res.Rejected = append(res.Rejected, Rejection{ID: id, Error: rejectionText(entry.Error, safe)})
		default:
			return nil, fmt.Sprintf(`result %d: status "%s" is neither accepted nor rejected`, i, safe(status))
		}
	}
	return res, ""
}

// resultID reads an id in its text form: a string as the contract sends
// it, or a bare JSON integer, which some servers send for a numeric id and
// which is compared by its text.
func resultID(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var text string
		if json.Unmarshal(raw, &text) != nil || text == "" {
			return "", false
		}
		return text, true
	}
	text := string(raw)
	if text == "" || (text[0] != '-' && (text[0] < '0' || text[0] > '9')) {
		return "", false
	}
	if _, err := strconv.ParseInt(text, 10, 64); err != nil {
		return "", false
	}
	return text, true
}

// rejectionText is a rejection's reason as safe text: a string as is, any
// other JSON value (an object with a code, say) as its JSON text.
func rejectionText(raw json.RawMessage, safe func(string) string) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return safe(s)
	}
	return safe(string(raw))
}
