package fakethirdparty

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// wireBatch is a decoded request body: ids and versions parsed, payloads
// only located (see scan.go), never copied or turned into Go values.
type wireBatch struct {
	Items []wireItem
}

type wireItem struct {
	ID      wireID
	Version int64
	Payload wirePayload
	// Deleted marks a tombstone: "deleted": true and no payload.
	Deleted bool
}

// wireID is an id as the contract sends it: a decimal string (v), or for
// a source's key (docs/protocol.md, Sources) any other string (text).
type wireID struct {
	v    int64
	text string
	set  bool
}

// idKey is an id as a map key: v for decimal ids, text for the others.
type idKey struct {
	v    int64
	text string
}

func (w wireID) key() idKey { return idKey{v: w.v, text: w.text} }

func (w wireID) String() string {
	if w.text != "" {
		return strconv.Quote(w.text)
	}
	return strconv.FormatInt(w.v, 10)
}

// wirePayload is a view of the payload's bytes inside the request body,
// valid only while the body buffer is.
type wirePayload struct {
	raw []byte
}

var batchPool = sync.Pool{New: func() any { return new(wireBatch) }}

// pair is one (id, version): the unit the contract promises to deliver once.
type pair struct {
	id      idKey
	version int64
}

// decodeBatch validates body against the contract and returns its items.
// The returned batch goes back to batchPool when the caller is done.
func decodeBatch(body []byte) (*wireBatch, error) {
	w := batchPool.Get().(*wireBatch)
	// Scan into the pooled slice so its capacity is reused from request
	// to request; a missing "items" and an empty one are the same refusal.
	items, err := scanBatch(body, w.Items[:0])
	w.Items = items
	// An error is built before the batch goes back to the pool: its items
	// are another request's the moment it is released.
	fail := func(err error) (*wireBatch, error) {
		w.release()
		return nil, err
	}
	if err != nil {
		return fail(err)
	}
	if len(w.Items) == 0 {
		return fail(errors.New(`batch has no "items"`))
	}
	ids := make([]idKey, len(w.Items))
	for i := range w.Items {
		it := &w.Items[i]
		if !it.ID.set {
			return fail(fmt.Errorf("item %d has no id", i))
		}
		if it.Version < 1 {
			return fail(fmt.Errorf("item %d (id %s): version must be at least 1", i, it.ID))
		}
		switch {
		case it.Deleted && it.Payload.raw != nil:
			return fail(fmt.Errorf("item %d (id %s) is a tombstone but carries a payload", i, it.ID))
		case !it.Deleted && it.Payload.raw == nil:
			return fail(fmt.Errorf("item %d (id %s) has no payload", i, it.ID))
		}
		ids[i] = it.ID.key()
	}
	slices.SortFunc(ids, func(a, b idKey) int { return cmp.Or(cmp.Compare(a.v, b.v), cmp.Compare(a.text, b.text)) })
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return fail(fmt.Errorf("id %s appears more than once in the batch", wireID{v: ids[i].v, text: ids[i].text}))
		}
	}
	return w, nil
}

func (w *wireBatch) release() {
	for i := range w.Items {
		w.Items[i] = wireItem{} // drop views into the body buffer
	}
	w.Items = w.Items[:0]
	if cap(w.Items) <= 10_000 {
		batchPool.Put(w)
	}
}

// fingerprint identifies the (id, version, deleted) of a batch's items in order, to
// catch a key reused for different content. FNV-1a: fast, and collisions
// only hide a client bug, they cannot corrupt anything.
func (w *wireBatch) fingerprint() uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	mix := func(v uint64) {
		for range 8 {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	for i := range w.Items {
		mix(uint64(w.Items[i].ID.v))
		for _, c := range []byte(w.Items[i].ID.text) {
			mix(uint64(c))
		}
		mix(uint64(w.Items[i].Version))
		if w.Items[i].Deleted {
			mix(1)
		}
	}
	return h
}

// hasTopLevelKey reports whether payload is an object with key name at its
// top level. The substring test rules out nearly every payload without
// scanning it; a payload with escapes is always scanned, since its keys may
// spell name with escapes.
func hasTopLevelKey(payload []byte, name string) bool {
	if name == "" {
		return false
	}
	if !bytes.Contains(payload, []byte(name)) && bytes.IndexByte(payload, '\\') < 0 {
		return false
	}
	return topLevelKey(payload, name)
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}
