package thirdparty

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// AppendBatch appends the request body of items to dst and returns it. The
// encoding is deterministic: the same items always give the same bytes, so a
// body can be re-derived (for a split half, say) byte for byte.
func AppendBatch(dst []byte, items []Item) []byte {
	buf := bytes.NewBuffer(dst)
	encodeBatch(buf, items, nil)
	return buf.Bytes()
}

// AppendBatchShared is AppendBatch that then points each item's payload at
// its own bytes in the body it returns, so a batch on its way holds its
// payloads once, not twice: the page they were read into is garbage as
// soon as its batch is encoded. A batch lives until it is marked, and the
// pipeline holds up to MaxInFlight+readAhead of them: with the checkpoint
// keeping packed bodies only, the daemon's live heap while it drains went
// from 5-6 MB to 3-4 MB (docs/benchmarks.md, memory).
// The body must not be written to afterwards; the payloads' capacity ends
// with them, so an append to one copies it.
func AppendBatchShared(dst []byte, items []Item) []byte {
	buf := bytes.NewBuffer(dst)
	starts := make([]int, len(items))
	encodeBatch(buf, items, starts)
	body := buf.Bytes()
	for i := range items {
		if n := len(items[i].Payload); n > 0 && !items[i].Deleted {
			items[i].Payload = body[starts[i] : starts[i]+n : starts[i]+n]
		}
	}
	return body
}

// DecodeBatch reads a body made by AppendBatch back into its items, payloads
// kept raw, so a recorded body can be split after a crash into the very
// halves it would have been split into before.
//
// It is strict: it accepts exactly the bodies AppendBatch makes, checked by
// encoding the items again and comparing bytes. A body it accepts therefore
// round-trips byte for byte (AppendBatch(DecodeBatch(body)) == body), which
// is what keeps one key on one body across a resend; anything else (extra
// fields, a payload on a tombstone, spacing, a non-canonical id) is an
// error rather than a body that would silently change on its next encoding.
func DecodeBatch(body []byte) ([]Item, error) {
	var w struct {
		Items []struct {
			ID      string          `json:"id"`
			Version int64           `json:"version"`
			Payload json.RawMessage `json:"payload"`
			Deleted bool            `json:"deleted"`
		} `json:"items"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("thirdparty: decode batch: %w", err)
	}
	items := make([]Item, len(w.Items))
	for i, it := range w.Items {
		if it.ID == "" {
			return nil, fmt.Errorf("thirdparty: decode batch: item %d: empty id", i)
		}
		items[i] = Item{ID: it.ID, Version: it.Version, Payload: it.Payload, Deleted: it.Deleted}
	}
	if !bytes.Equal(AppendBatch(make([]byte, 0, len(body)), items), body) {
		return nil, errors.New("thirdparty: decode batch: body is not as AppendBatch writes it")
	}
	return items, nil
}

// batchKeyDomain separates these hashes from the v1 keys (ids and versions
// only, before bodies were recorded) and from any
// other SHA-256 of similar bytes.
const batchKeyDomain = "syncer idempotency key v2\x00"

// BatchKey derives the Idempotency-Key of a request body: a SHA-256 over the
// installation's identity, the salt and the exact body, so two installations
// never share a key, and one key never names two bodies.
func BatchKey(installation, salt string, body []byte) string {
	return batchKey(installation, salt, nil, body)
}

// RequestKey is the Idempotency-Key of a request of a format that is not
// the batch itself: BatchKey of "METHOD path\n" followed by the body,
// hashed in pieces so the body is never copied.
func RequestKey(installation, salt, method, path string, body []byte) string {
	var head [256]byte
	h := append(append(append(append(head[:0], method...), ' '), path...), '\n')
	return batchKey(installation, salt, h, body)
}

// keyStates keeps SHA-256 states between keys, a key being made per
// request, with the scratch they are fed from: a buffer written to a
// hash.Hash escapes, so one on the stack would be a heap allocation each.
var keyStates = sync.Pool{New: func() any { return &keyState{h: sha256.New()} }}

type keyState struct {
	h   hash.Hash
	pre []byte
	sum [sha256.Size]byte
}

func batchKey(installation, salt string, head, body []byte) string {
	st := keyStates.Get().(*keyState)
	defer keyStates.Put(st)
	h := st.h
	h.Reset()
	// Everything before the body goes in one write.
	p := append(st.pre[:0], batchKeyDomain...)
	for _, part := range []string{installation, salt} {
		p = binary.BigEndian.AppendUint64(p, uint64(len(part)))
		p = append(p, part...)
	}
	p = append(p, head...)
	_, _ = h.Write(p)
	st.pre = p[:0]
	_, _ = h.Write(body)
	const prefix = "syncer-"
	var out [len(prefix) + 2*sha256.Size]byte
	copy(out[:], prefix)
	hex.Encode(out[len(prefix):], h.Sum(st.sum[:0]))
	return string(out[:])
}

// AppendString appends s as a JSON string, exactly as encoding/json
// writes it (so bodies keep their bytes whichever path wrote them), without
// its reflection when s is plain ASCII that needs no escape: the ids of a
// batch nearly always are.
func AppendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
