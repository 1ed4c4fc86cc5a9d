package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The batches in flight are written with every mark, so they are packed:
// ids as varint deltas (consecutive ids take one byte) and versions as
// varints (most are small). 500 rows take about 1 KB instead of 14 KB of
// JSON, which PostgreSQL would also compress and move to TOAST each time.
//
// Layout: uvarint count, then per batch: uvarint len + key, uvarint len +
// salt, uvarint rows, then per row: varint id delta, uvarint version.

func encode(batches []Inflight) []byte {
	if len(batches) == 0 {
		return []byte{}
	}
	size := 8
	for _, b := range batches {
		size += len(b.Key) + len(b.Salt) + 12 + 3*len(b.IDs)
	}
	out := make([]byte, 0, size)
	out = binary.AppendUvarint(out, uint64(len(batches)))
	for _, b := range batches {
		out = binary.AppendUvarint(out, uint64(len(b.Key)))
		out = append(out, b.Key...)
		out = binary.AppendUvarint(out, uint64(len(b.Salt)))
		out = append(out, b.Salt...)
		out = binary.AppendUvarint(out, uint64(len(b.IDs)))
		var prev int64
		for i, id := range b.IDs {
			out = binary.AppendVarint(out, id-prev)
			prev = id
			out = binary.AppendUvarint(out, uint64(b.Versions[i]))
		}
	}
	return out
}

var errCorrupt = errors.New("corrupt record")

func decode(data []byte) ([]Inflight, error) {
	if len(data) == 0 {
		return nil, nil
	}
	r := reader{data: data}
	n := r.uvarint()
	if n > uint64(len(data)) {
		return nil, errCorrupt
	}
	out := make([]Inflight, 0, n)
	for range n {
		var b Inflight
		b.Key = r.string()
		b.Salt = r.string()
		rows := r.uvarint()
		if r.err != nil || rows > uint64(len(data)) {
			return nil, errCorrupt
		}
		b.IDs, b.Versions = make([]int64, rows), make([]int64, rows)
		var prev int64
		for i := range rows {
			prev += r.varint()
			b.IDs[i] = prev
			b.Versions[i] = int64(r.uvarint())
		}
		out = append(out, b)
	}
	if r.err != nil || r.off != len(data) {
		return nil, fmt.Errorf("%w at byte %d", errCorrupt, r.off)
	}
	return out, nil
}

type reader struct {
	data []byte
	off  int
	err  error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.data[r.off:])
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.data[r.off:])
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.off += n
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.data)-r.off) {
		r.err = errCorrupt
		return ""
	}
	s := string(r.data[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}
