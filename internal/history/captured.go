package history

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// capturedAt is a capture time as an element of the common batch's
// timestamptz[] (feed.Item.CapturedAt: microseconds since the Unix
// epoch). The array goes to pgx as pointers to these, nil for NULL: pgx
// boxes each element of an array into an interface to encode it, and a
// time.Time or a pgtype.Timestamptz boxed is an allocation apiece, where
// a pointer is none (a batch of 500 rows: 1,003 allocations and 24 KB
// before, 3 and 56 bytes with pointers, in a third of the time; issue 55).
type capturedAt int64

// TimestamptzValue is c as pgx encodes it (pgtype.TimestamptzValuer).
func (c capturedAt) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.UnixMicro(int64(c)), Valid: true}, nil
}

// capturedArrays are a transaction's captured columns, kept by Arrays.
type capturedArrays struct {
	at   [][]capturedAt
	ptrs [][]*capturedAt
	used int
}

// take returns a time and a pointer array of length n: a nil
// *capturedArrays makes new ones.
func (c *capturedArrays) take(n int) ([]capturedAt, []*capturedAt) {
	if c == nil {
		return make([]capturedAt, n), make([]*capturedAt, n)
	}
	if c.used == len(c.at) {
		c.at, c.ptrs = append(c.at, nil), append(c.ptrs, nil)
	}
	i := c.used
	c.used++
	if cap(c.at[i]) < n {
		c.at[i], c.ptrs[i] = make([]capturedAt, n), make([]*capturedAt, n)
	}
	return c.at[i][:n], c.ptrs[i][:n]
}

// captured returns Arrays' captured columns, nil for a nil *Arrays.
func (a *Arrays) captured() *capturedArrays {
	if a == nil {
		return nil
	}
	return &a.cap
}
