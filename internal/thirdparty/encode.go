package thirdparty

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// encodeBatch writes {"items":[{"id":"42","version":3,"payload":...}]} by
// hand: an id of plain characters (a row's decimal id, most keys) is
// written as is, any other is escaped by encoding/json (deterministic, and
// the same bytes as before ids were one type), versions are integers, and
// payloads are already JSON, so nothing here needs reflection or a second
// copy. starts, when not nil, gets where each item's payload begins in
// buf (its length is the item's).
func encodeBatch(buf *bytes.Buffer, items []Item, starts []int) {
	size := 16
	for i := range items {
		size += 56 + len(items[i].Payload)
	}
	buf.Grow(size)
	var num [20]byte
	buf.WriteString(`{"items":[`)
	for i := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"id":`)
		writeID(buf, items[i].ID)
		buf.WriteString(`,"version":`)
		buf.Write(strconv.AppendInt(num[:0], items[i].Version, 10))
		if items[i].Deleted {
			buf.WriteString(`,"deleted":true}`)
			continue
		}
		buf.WriteString(`,"payload":`)
		if len(items[i].Payload) == 0 {
			buf.WriteString("null")
		} else {
			if starts != nil {
				starts[i] = buf.Len()
			}
			buf.Write(items[i].Payload)
		}
		buf.WriteByte('}')
	}
	buf.WriteString(`]}`)
}

// writeID writes id as the JSON string encoding/json makes of it, byte for
// byte (a recorded body is encoded again on a resend). An id of printable
// ASCII is written in place, its quotes and backslashes escaped: a
// composite key's id is a JSON array, with quotes around its text values,
// and json.Marshal for each of a batch's items cost the drain of such a
// source (issue 29). Other ids go through json.Marshal.
func writeID(buf *bytes.Buffer, id string) {
	if !asciiID(id) {
		k, _ := json.Marshal(id) // a string always marshals
		buf.Write(k)
		return
	}
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '"' || c == '\\' {
			buf.WriteString(id[start:i])
			buf.WriteByte('\\')
			start = i // the byte itself goes with the next run
		}
	}
	buf.WriteString(id[start:])
	buf.WriteByte('"')
}

// asciiID reports whether encoding/json escapes no byte of id but the
// quote and the backslash, as a backslash before it: printable ASCII but
// the three characters it escapes for HTML.
func asciiID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < 0x20 || c > 0x7e || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
