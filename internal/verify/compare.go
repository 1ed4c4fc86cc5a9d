package verify

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// classify sorts one key that is not pending, given what the destination
// holds for it (ok: the answer named it).
func classify(h *Here, t There, ok bool) Kind {
	switch {
	case h.Failed:
		// Whatever the third party holds, it refused what is here: the
		// key is failed, not missing or stale, until the row changes or
		// someone retries it.
		return Failed
	case ok && t.Unknown:
		return Unknown
	case h.Gone:
		if ok && !t.Deleted {
			return Zombie
		}
		return OK
	case !ok || t.Deleted:
		return Missing
	case h.Accepted > 0 && t.Version > 0 && t.Version < h.Accepted:
		return Stale
	case t.Compared:
		if !t.Agrees {
			return Stale
		}
		return OK
	case !SameJSON(h.Payload, t.Payload):
		return Stale
	}
	return OK
}

// SameJSON reports whether a and b are the same JSON value: key order,
// spacing and number spelling (1 and 1.0) make no difference.
func SameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	return okA && okB && reflect.DeepEqual(va, vb)
}

func decode(raw json.RawMessage) (any, bool) {
	if len(raw) == 0 {
		return nil, true
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}
