package compose

import "github.com/jackc/pgx/v5/pgtype"

// int8s is a []int64 argument as pgx encodes it without an allocation an
// element: pgx hands each element of an array to its encoder in an
// interface, and an int64 of 256 or more put in one is an allocation
// (a batch's ids: 500 a statement), where a pointer is none (issue 55).
// The encoding is the []int64's: an int8[], NULL for a nil slice.
type int8s []int64

// Dimensions is pgtype.ArrayGetter's: as pgtype.FlatArray's.
func (a int8s) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index is pgtype.ArrayGetter's: a pointer to the element.
func (a int8s) Index(i int) any { return (*int8Elem)(&a[i]) }

// IndexType is pgtype.ArrayGetter's.
func (a int8s) IndexType() any { return new(int8Elem) }

// int8Elem is an element of int8s.
type int8Elem int64

// Int64Value is pgtype.Int64Valuer's.
func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}
