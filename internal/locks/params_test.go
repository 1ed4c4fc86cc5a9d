package locks

import (
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The pipe's arguments are encoded as pgx's ExtendedQueryBuilder encodes
// them: the same formats and the same bytes, NULLs included, statement
// after statement in the one buffer, and a value encoded earlier stays
// whole when a later one grows the buffer.
func TestParamsEncodeAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	sd := &pgconn.StatementDescription{
		ParamOIDs: []uint32{pgtype.TextOID, pgtype.Int8OID, pgtype.Int8ArrayOID, pgtype.TextArrayOID,
			pgtype.ByteaArrayOID, pgtype.TimestamptzArrayOID, pgtype.BoolArrayOID, pgtype.TimestamptzOID, pgtype.ByteaOID, pgtype.Int2OID},
		Fields: []pgconn.FieldDescription{{DataTypeOID: pgtype.Int8OID}, {DataTypeOID: pgtype.TextOID}},
	}
	at := time.Date(2026, 11, 29, 15, 0, 0, 123000, time.UTC)
	big := make([]byte, 5000)
	for i := range big {
		big[i] = byte(i)
	}
	argSets := [][]any{
		{"resources", int64(7), []int64{1, 2, 3}, []string{"a", "b"}, [][]byte{{1, 2}, big}, []time.Time{at, at}, []bool(nil), at, big, int16(200)},
		{nil, int64(-1), []int64{}, []string{"x"}, [][]byte{}, nil, []bool{true, false}, nil, []byte{}, int16(0)},
	}
	var p params
	for round := range 2 {
		for i, args := range argSets {
			var eqb pgx.ExtendedQueryBuilder
			if err := eqb.Build(m, sd, args); err != nil {
				t.Fatalf("pgx: set %d: %v", i, err)
			}
			if err := p.build(m, sd, args); err != nil {
				t.Fatalf("params: set %d: %v", i, err)
			}
			if !reflect.DeepEqual(p.formats, eqb.ParamFormats) || !reflect.DeepEqual(p.results, eqb.ResultFormats) {
				t.Fatalf("round %d set %d: formats %v %v, pgx's %v %v", round, i, p.formats, p.results, eqb.ParamFormats, eqb.ResultFormats)
			}
			if len(p.values) != len(eqb.ParamValues) {
				t.Fatalf("round %d set %d: %d values, pgx's %d", round, i, len(p.values), len(eqb.ParamValues))
			}
			for j := range p.values {
				if (p.values[j] == nil) != (eqb.ParamValues[j] == nil) || string(p.values[j]) != string(eqb.ParamValues[j]) {
					t.Fatalf("round %d set %d: value %d is %x, pgx's %x", round, i, j, p.values[j], eqb.ParamValues[j])
				}
			}
		}
	}
	if err := p.build(m, sd, []any{"too few"}); err == nil {
		t.Fatal("params: no error for too few arguments")
	}
}
