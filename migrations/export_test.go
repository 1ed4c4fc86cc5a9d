package migrations

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// UpTo applies River's migrations and syncer's up to version last only.
func UpTo(ctx context.Context, pool *pgxpool.Pool, last int) (*Result, error) {
	return upTo(ctx, pool, nil, nil, last)
}
