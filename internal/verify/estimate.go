package verify

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// Sizer is a Source that can tell about how many keys it holds, so a
// background run can spread its pages over its period.
type Sizer interface {
	Estimate(ctx context.Context, q database.Querier) (int64, error)
}

var (
	_ Sizer = (*Resources)(nil)
	_ Sizer = (*Configured)(nil)
)

// Estimate is the resources table's rows, tombstones included.
func (s *Resources) Estimate(ctx context.Context, q database.Querier) (int64, error) {
	return estimateRows(ctx, q, pgx.Identifier{"resources"}.Sanitize())
}

// Estimate is the application's table's rows.
func (c *Configured) Estimate(ctx context.Context, q database.Querier) (int64, error) {
	return estimateRows(ctx, q, pgx.Identifier{c.src.Schema, c.src.Table}.Sanitize())
}

// estimateRows reads the planner's estimate of table's rows, which costs
// nothing however large the table; a table never analysed has none, and
// is counted instead (once a period).
func estimateRows(ctx context.Context, q database.Querier, table string) (int64, error) {
	var n float64
	err := q.QueryRow(ctx, `SELECT COALESCE((SELECT reltuples FROM pg_catalog.pg_class WHERE oid = pg_catalog.to_regclass($1)), -1)`, table).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("verify: estimate the rows of %s: %w", table, err)
	}
	if n >= 0 {
		return int64(n), nil
	}
	var c int64
	if err := q.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&c); err != nil {
		return 0, fmt.Errorf("verify: count the rows of %s: %w", table, err)
	}
	return c, nil
}
