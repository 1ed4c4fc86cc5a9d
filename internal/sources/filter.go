package sources

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/database"
)

// A source's row filter (where:, section 7) is evaluated where the write
// happens: the capture function logs a change only for a row that matches
// after the write, or that matched before it (its key then reads as a
// tombstone, since a row that no longer matches is looked up as gone). A
// row that matched neither before nor after logs nothing, so a row that
// never matched since it was last exported is never sent, not even its
// delete. Pending, the snapshot and replays read the row through the
// filter, so what is sent is what matches when it is read.
//
// The expression is written unqualified, over the table's columns: each
// place puts it where the table's row is the innermost relation (t, the
// transition tables n and o, or a one-row subquery of NEW or OLD), so its
// column names resolve to that row.

// filterAnd is " AND (where)", or empty without a filter.
func (s *Source) filterAnd() string {
	if s.Where == "" {
		return ""
	}
	return " AND (" + s.Where + ")"
}

// filterWhere is " WHERE (where)", or empty without a filter.
func (s *Source) filterWhere() string {
	if s.Where == "" {
		return ""
	}
	return " WHERE (" + s.Where + ")"
}

// filterCond is "(where) AND ", to begin a condition, or empty without a
// filter.
func (s *Source) filterCond() string {
	if s.Where == "" {
		return ""
	}
	return "(" + s.Where + ") AND "
}

// filterOfRecord is the filter on a PL/pgSQL record (NEW or OLD), as a
// boolean expression: true without a filter.
func (s *Source) filterOfRecord(rec string) string {
	if s.Where == "" {
		return "true"
	}
	return "EXISTS (SELECT FROM (SELECT " + rec + ".*) syncer_row WHERE (" + s.Where + "))"
}

// checkFilter compiles the source's filter against its table, reading no
// row: an expression that does not compile (a column the table lacks, a
// type mismatch, a parameter, not a boolean) is the source's error.
func checkFilter(ctx context.Context, q database.Querier, s *Source) error {
	if s.Where == "" {
		return nil
	}
	// In a savepoint of its own (or a transaction, on a pool), so that
	// the error leaves the caller's transaction usable.
	if b, ok := q.(database.DB); ok {
		tx, err := b.Begin(ctx)
		if err != nil {
			return fmt.Errorf("sources: source %s: where: %w", s.Name, err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		q = tx
	}
	rows, err := q.Query(ctx, "SELECT FROM "+s.table()+" syncer_row WHERE ("+s.Where+") LIMIT 0")
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return &SourceError{Source: s.Name, Err: fmt.Errorf("where: %q does not compile against %s: %w", s.Where, s.QualifiedTable(), err)}
	}
	return nil
}
