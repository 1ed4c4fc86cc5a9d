package sources

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// KeyComposite is a key of several columns, each of the other kinds: its
// text form is the compact JSON array of its values (docs/protocol.md, Table shapes), and it is
// read back column by column.
const KeyComposite KeyKind = "composite"

// composite reports whether the key has several columns.
func (s *Source) composite() bool { return len(s.Keys) > 1 }

// keysRecorded and kindsRecorded are what syncer_sources records of the
// key's columns: NULL for a key of one column, which key_column and
// key_kind hold alone.
func (s *Source) keysRecorded() []string {
	if !s.composite() {
		return nil
	}
	return s.Keys
}

func (s *Source) kindsRecorded() []KeyKind {
	if !s.composite() {
		return nil
	}
	return s.Kinds
}

// keyColumns are the key's columns qualified by alias, in the key's order.
func (s *Source) keyColumns(alias string) []string {
	out := make([]string, len(s.Keys))
	for i, k := range s.Keys {
		out[i] = alias + "." + pgx.Identifier{k}.Sanitize()
	}
	return out
}

// keyTextSQL is the key's text form from its columns' values: the value as
// text for a key of one column; for several, '[' and each value's to_jsonb
// text joined by commas and ']' (to_jsonb writes a scalar compactly, so two
// keys never share a text). Its type, function and operator are named with
// pg_catalog: the capture function reads it under the writer's search_path
// (captureBody).
func (s *Source) keyTextSQL(cols []string) string {
	if !s.composite() {
		return cols[0] + "::pg_catalog.text"
	}
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = "pg_catalog.to_jsonb(" + c + ")::pg_catalog.text"
	}
	return "'[' OPERATOR(pg_catalog.||) " + strings.Join(parts, " OPERATOR(pg_catalog.||) ',' OPERATOR(pg_catalog.||) ") + " OPERATOR(pg_catalog.||) ']'"
}

// numSQL is the change log's num of a key: the integer itself for a key of
// one integer column (read in numeric order), else 0.
func (s *Source) numSQL(cols []string) string {
	if s.Kind == KeyInteger {
		return cols[0] + "::bigint"
	}
	return "0"
}

// keyValuesSQL reads a key's text form (the SQL expression text) back as
// its columns' values, each of its column's type.
func (s *Source) keyValuesSQL(text string) []string {
	if !s.composite() {
		return []string{text + "::" + castOf(s.Kind)}
	}
	return s.keyValuesOfJSONSQL("(" + text + ")::jsonb")
}

// keyValuesOfJSONSQL reads a composite key's values out of the SQL
// expression j, its text form already parsed as jsonb: a statement that
// reads each key of a batch parses it once and not once a column
// (pendingSQL).
func (s *Source) keyValuesOfJSONSQL(j string) []string {
	out := make([]string, len(s.Keys))
	for i, k := range s.Kinds {
		out[i] = "(" + j + " ->> " + strconv.Itoa(i) + ")::" + castOf(k)
	}
	return out
}

// keyMatchSQL is the condition that the table's row (alias t) has the
// key's columns equal to vals (keyValuesSQL, keyValuesOfJSONSQL), in the
// key's order.
func (s *Source) keyMatchSQL(vals []string) string {
	cols := s.keyColumns("t")
	conds := make([]string, len(cols))
	for i := range cols {
		conds[i] = cols[i] + " = " + vals[i]
	}
	return strings.Join(conds, " AND ")
}

// rowSQL is a list of expressions as one value: itself alone, a row of
// several, so that comparing two of them compares column by column.
func rowSQL(exprs []string) string {
	if len(exprs) == 1 {
		return exprs[0]
	}
	return "(" + strings.Join(exprs, ", ") + ")"
}

// castOf is the type a key column's text form is read back as.
func castOf(k KeyKind) string {
	switch k {
	case KeyInteger:
		return "bigint"
	case KeyUUID:
		return "uuid"
	}
	return "text"
}

// normalizeComposite reads a composite key's text form, a JSON array of
// one value per column (a number for an integer column, a string for the
// others), and writes it back in the form syncer logs it.
func (s *Source) normalizeComposite(text string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var vals []any
	if err := dec.Decode(&vals); err != nil || dec.More() {
		return "", fmt.Errorf("%q is not a JSON array of the key's values (%s): %w", text, strings.Join(s.Keys, ", "), ErrBadKey)
	}
	if len(vals) != len(s.Keys) {
		return "", fmt.Errorf("%q has %d values, the key %d (%s): %w", text, len(vals), len(s.Keys), strings.Join(s.Keys, ", "), ErrBadKey)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		switch s.Kinds[i] {
		case KeyInteger:
			n, ok := v.(json.Number)
			if !ok {
				return "", fmt.Errorf("%q: %s must be a number: %w", text, s.Keys[i], ErrBadKey)
			}
			x, err := strconv.ParseInt(n.String(), 10, 64)
			if err != nil {
				return "", fmt.Errorf("%q: %s is not an integer: %w", text, s.Keys[i], ErrBadKey)
			}
			b.WriteString(strconv.FormatInt(x, 10))
		default:
			str, ok := v.(string)
			if !ok {
				return "", fmt.Errorf("%q: %s must be a string: %w", text, s.Keys[i], ErrBadKey)
			}
			if s.Kinds[i] == KeyUUID {
				if str = strings.ToLower(strings.Trim(str, "{}")); !uuidText.MatchString(str) {
					return "", fmt.Errorf("%q: %s is not a uuid: %w", text, s.Keys[i], ErrBadKey)
				}
			}
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(str); err != nil {
				return "", err
			}
			b.Truncate(b.Len() - 1) // Encode's newline
		}
	}
	b.WriteByte(']')
	return b.String(), nil
}

// compareComposite compares two normalized composite keys column by
// column: integers as numbers, text and uuid in byte order.
func (s *Source) compareComposite(a, b string) int {
	var x, y []json.RawMessage
	_ = json.Unmarshal([]byte(a), &x)
	_ = json.Unmarshal([]byte(b), &y)
	for i := range min(len(x), len(y)) {
		var c int
		if s.Kinds[i] == KeyInteger {
			p, _ := strconv.ParseInt(string(x[i]), 10, 64)
			q, _ := strconv.ParseInt(string(y[i]), 10, 64)
			c = cmp.Compare(p, q)
		} else {
			var p, q string
			_ = json.Unmarshal(x[i], &p)
			_ = json.Unmarshal(y[i], &q)
			c = strings.Compare(p, q)
		}
		if c != 0 {
			return c
		}
	}
	return 0
}
