// Package compose builds one SQL statement out of pieces written by the
// packages that own their tables: each piece is a common table
// expression, the statement runs them all, and the pieces share their
// arguments (a batch's keys sent once for its marks, its story and its
// digests: issue 55). The caller composes; every piece's SQL stays with
// its table's owner.
//
// Every piece sees the snapshot the statement started with, not another
// piece's writes (PostgreSQL's data-modifying WITH): pieces must write
// tables, or rows, no other piece of the statement reads or writes.
package compose

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Statement is a statement being composed. The zero Statement is empty.
type Statement struct {
	parts []string
	reads []string // the parts the final SELECT reads: they run only if read
	args  []any
}

// Arg adds v as an argument and returns its placeholder ("$3"). A
// []int64 goes as int8s, encoded the same without an allocation an
// element.
func (s *Statement) Arg(v any) string {
	if a, ok := v.([]int64); ok {
		v = int8s(a)
	}
	s.args = append(s.args, v)
	return "$" + strconv.Itoa(len(s.args))
}

// Modify adds a data-modifying piece (INSERT, UPDATE or DELETE): PostgreSQL
// runs it to its end whether the statement reads its rows or not.
func (s *Statement) Modify(sql string) {
	s.parts = append(s.parts, sql)
}

// Call adds a piece that is a SELECT of one row (a function that writes,
// say): the statement reads it, so it runs once.
func (s *Statement) Call(sql string) {
	s.parts = append(s.parts, sql)
	s.reads = append(s.reads, s.name(len(s.parts)-1))
}

// Len is the number of pieces.
func (s *Statement) Len() int { return len(s.parts) }

func (s *Statement) name(i int) string { return "p" + strconv.Itoa(i) }

// SQL is the statement's text: its pieces as WITH queries, and a SELECT of
// one row that reads the pieces added with Call.
func (s *Statement) SQL() string {
	var b strings.Builder
	for i, p := range s.parts {
		if i == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(s.name(i))
		b.WriteString(" AS (")
		b.WriteString(p)
		b.WriteString(")")
	}
	b.WriteString(" SELECT 1")
	if len(s.reads) > 0 {
		b.WriteString(" FROM ")
		b.WriteString(strings.Join(s.reads, ", "))
	}
	return b.String()
}

// Queue queues the statement on b, its error said as what's; nothing when
// it has no piece.
func (s *Statement) Queue(b *pgx.Batch, what string) {
	if len(s.parts) == 0 {
		return
	}
	b.Queue(s.SQL(), s.args...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}
