package operator

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/verify"
)

// VerifyNow asks the running daemons to verify a source now (the
// console's "Verify now"): the first daemon whose verify loop sees the
// request runs it, under the destination's limits, and its result is the
// source's last verify. It heals only when the destination has
// verify_heal.
func VerifyNow(ctx context.Context, pool *pgxpool.Pool, source string) error {
	if _, err := rows.Open(ctx, pool, rows.Scope{Source: source}); err != nil {
		return err
	}
	return verify.Request(ctx, pool, source)
}
