package compose

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// TestInt64ArgsEncodeWithoutAnAllocationApiece: a []int64 argument (a
// batch's ids) encodes as the int8[] it was, NULL when nil, in a few
// allocations where pgx took one an element of 256 or more (503 for 500
// ids).
func TestInt64ArgsEncodeWithoutAnAllocationApiece(t *testing.T) {
	ids := make([]int64, 500)
	for i := range ids {
		ids[i] = int64(100000+i) * 7
	}
	ids[3] = -1 << 63
	var s Statement
	s.Arg(ids)
	s.Arg([]int64(nil))
	s.Arg([]int64{})
	m := pgtype.NewMap()
	var buf []byte
	allocs := testing.AllocsPerRun(20, func() {
		var err error
		buf, err = m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, s.args[0], buf[:0])
		require.NoError(t, err)
	})
	require.LessOrEqual(t, allocs, 5.0, "allocations to encode 500 ids")
	want, err := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, ids, nil)
	require.NoError(t, err)
	require.Equal(t, want, buf, "the bytes a []int64 encodes to")
	var back []int64
	require.NoError(t, m.Scan(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, buf, &back))
	require.Equal(t, ids, back)

	for i, v := range []any{[]int64(nil), []int64{}} {
		got, err := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, s.args[1+i], nil)
		require.NoError(t, err)
		want, err := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, v, nil)
		require.NoError(t, err)
		require.Equal(t, want, got, "%#v", v)
	}
	nilGot, _ := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, s.args[1], nil)
	require.Nil(t, nilGot, "a nil slice is NULL")
}
