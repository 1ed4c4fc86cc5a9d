package locks

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// params encodes a pipe's statements' arguments, as pgx's
// ExtendedQueryBuilder does (the same formats, the same encodings, the
// other format tried when the preferred one fails), into one buffer
// kept from one statement to the next. pgx's builder drops its buffer
// whenever it passed 256 bytes and grows a new one from 128 by
// doubling: a marker transaction's arguments (a batch's ids and
// versions, its digests, its packed body) were encoded into a fresh
// buffer each time, a fifth of everything a drain allocated (issue 55).
// The pipeline's Bind copies the values into the connection's buffer
// as each statement is queued, so the next statement may reuse them.
type params struct {
	values  [][]byte
	formats []int16
	results []int16
	buf     []byte
}

// paramsKeptMax is the most buffer a pipe keeps between statements: a
// transaction of larger arguments (a record of many large batches)
// encodes into a buffer of its own, not kept alive after it.
const paramsKeptMax = 1 << 20

// build encodes args for the prepared statement sd.
func (p *params) build(m *pgtype.Map, sd *pgconn.StatementDescription, args []any) error {
	if cap(p.buf) > paramsKeptMax {
		p.buf = nil
	}
	p.values, p.formats, p.results, p.buf = p.values[:0], p.formats[:0], p.results[:0], p.buf[:0]
	if len(sd.ParamOIDs) != len(args) {
		return fmt.Errorf("%d arguments for %d parameters", len(args), len(sd.ParamOIDs))
	}
	for i, arg := range args {
		oid := sd.ParamOIDs[i]
		format := m.FormatCodeForOID(oid)
		switch arg.(type) {
		case string, *string:
			format = pgx.TextFormatCode
		}
		v, err := p.encode(m, oid, format, arg)
		if err != nil {
			other := int16(pgx.TextFormatCode)
			if format == pgx.TextFormatCode {
				other = pgx.BinaryFormatCode
			}
			var otherErr error
			if v, otherErr = p.encode(m, oid, other, arg); otherErr != nil {
				return fmt.Errorf("failed to encode args[%d]: %w", i, err)
			}
			format = other
		}
		p.formats = append(p.formats, format)
		p.values = append(p.values, v)
	}
	for _, f := range sd.Fields {
		p.results = append(p.results, m.FormatCodeForOID(f.DataTypeOID))
	}
	return nil
}

// encode appends arg's encoding to the buffer and returns it: nil for
// NULL. A value encoded before an append that moved the buffer stays
// whole in the old array.
func (p *params) encode(m *pgtype.Map, oid uint32, format int16, arg any) ([]byte, error) {
	pos := len(p.buf)
	buf, err := m.Encode(oid, format, arg, p.buf)
	if err != nil {
		p.buf = p.buf[:pos]
		return nil, err
	}
	if buf == nil {
		return nil, nil
	}
	p.buf = buf
	return buf[pos:len(buf):len(buf)], nil
}
