// Package elasticsearch is the destination format of the bulk API of
// Elasticsearch and OpenSearch (docs/protocol.md section  7): one request per
// batch, POST {url}/_bulk, an index or delete action per item with the
// item's version as an external version, and an answer read item by item.
//
// What it guarantees: the body is a function of the items alone, so a
// resend is byte-identical; external versioning makes a resend harmless (a
// version the index already holds answers 409, which accepts it); and
// acceptance is positive: an answer whose items do not match the actions
// one for one, in order and by _id, marks nothing.
package elasticsearch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Name is the format's name in configuration.
const Name = "elasticsearch"

// ContentType is the bulk API's content type.
const ContentType = "application/x-ndjson"

// Path is appended to the destination's URL, which names the index.
const Path = "/_bulk"

// Format is the elasticsearch format. The zero value is ready to use.
type Format struct{}

// Requests makes one bulk request of the whole batch.
func (Format) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	return []thirdparty.Request{Request(b.Items)}, nil
}

// Request is the bulk request of items.
func Request(items []thirdparty.Item) thirdparty.Request {
	size := 0
	for i := range items {
		size += 80 + len(items[i].Payload)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	ids := make([]string, len(items))
	var num [20]byte
	scratch := make([]byte, 0, 64)
	for i, it := range items {
		ids[i] = it.ID
		if it.Deleted {
			buf.WriteString(`{"delete":{"_id":`)
		} else {
			buf.WriteString(`{"index":{"_id":`)
		}
		buf.Write(thirdparty.AppendString(scratch[:0], ids[i]))
		buf.WriteString(`,"version":`)
		buf.Write(strconv.AppendInt(num[:0], it.Version, 10))
		buf.WriteString(`,"version_type":"external"}}` + "\n")
		if it.Deleted {
			continue
		}
		if len(it.Payload) == 0 {
			buf.WriteString("null")
		} else {
			// A jsonb value's text has no line break outside strings, and
			// JSON strings escape theirs: one line, as NDJSON wants.
			buf.Write(it.Payload)
		}
		buf.WriteByte('\n')
	}
	return thirdparty.Request{Path: Path, ContentType: ContentType, Body: buf.Bytes(), IDs: ids, Items: items}
}

// answer is the part of a bulk answer that is read. An entry is read
// into named fields rather than a map: an entry with neither action (a
// "create", say) or with both is not an answer.
type answer struct {
	Items []struct {
		Index  *result `json:"index"`
		Delete *result `json:"delete"`
	} `json:"items"`
}

type result struct {
	ID     *string `json:"_id"`
	Status int     `json:"status"`
	Error  *struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	} `json:"error"`
}

// Read reads a bulk answer item by item: a 2xx, a 409 (the index holds this
// version or a newer one) and a 404 to a delete (nothing was there) accept;
// 429 and 5xx leave the item pending; any other status rejects it with the
// error's type and reason. An answer that is not a 2xx is read by the
// common rules.
func (Format) Read(r *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error) {
	if !a.OK() {
		return nil, a.Refusal()
	}
	ans, err := scanAnswer(a.Body)
	if err != nil {
		// Anything the fast path does not take is read by encoding/json,
		// which says what is wrong with it, if anything.
		ans = answer{}
		if err := json.Unmarshal(a.Body, &ans); err != nil {
			return nil, a.NotAnAnswer("not a bulk answer: " + err.Error())
		}
	}
	if len(ans.Items) != len(r.Items) {
		return nil, a.NotAnAnswer(fmt.Sprintf("the answer has %d items for %d actions", len(ans.Items), len(r.Items)))
	}
	res := &thirdparty.Result{}
	for i, entry := range ans.Items {
		it := r.Items[i]
		action, got, other := "index", entry.Index, entry.Delete
		if it.Deleted {
			action, got, other = "delete", entry.Delete, entry.Index
		}
		if got == nil || other != nil {
			return nil, a.NotAnAnswer(fmt.Sprintf("item %d is not the answer to a %s action", i, action))
		}
		if got.ID == nil || *got.ID != r.IDs[i] {
			return nil, a.NotAnAnswer(fmt.Sprintf("item %d is not the answer for _id %q", i, r.IDs[i]))
		}
		switch s := got.Status; {
		case s >= 200 && s < 300, s == 409, s == 404 && it.Deleted:
		case s == 429 || s >= 500 && s < 600:
			text := strconv.Itoa(s)
			if got.Error != nil {
				text += " " + got.Error.Type + ": " + got.Error.Reason
			}
			res.Pending = append(res.Pending, r.IDs[i])
			res.PendingReasons = append(res.PendingReasons, a.Safe(text))
		case s == 0:
			return nil, a.NotAnAnswer(fmt.Sprintf("item %d has no status", i))
		default:
			text := strconv.Itoa(s)
			if got.Error != nil {
				text += " " + got.Error.Type + ": " + got.Error.Reason
			}
			res.Rejected = append(res.Rejected, thirdparty.Rejection{ID: r.IDs[i], Error: a.Safe(text)})
		}
	}
	return res, nil
}
