package sources

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// SourceFailure is a failed key of any source, for status and the console.
type SourceFailure struct {
	Source      string
	Destination string
	// Tenant is the tenant the key failed for; empty for a source without
	// a tenant column.
	Tenant string
	Failure
}

// AllRecentFailures returns the most recently failed keys of every source
// that have not changed since, latest first, at most limit of them.
func AllRecentFailures(ctx context.Context, q database.Querier, limit int) ([]SourceFailure, error) {
	rows, err := q.Query(ctx, `SELECT f.source, s.destination, COALESCE(f.tenant, ''), f.key, f.version, f.failed_at, f.error
		FROM syncer_source_failures f JOIN syncer_sources s ON s.name = f.source
		WHERE NOT EXISTS (SELECT 1 FROM syncer_changes c WHERE c.source = f.source AND c.num = f.num AND c.key = f.key AND c.tenant IS NOT DISTINCT FROM f.tenant)
		ORDER BY f.failed_at DESC, f.source DESC, f.key DESC, f.tenant DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("sources: failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SourceFailure, error) {
		var f SourceFailure
		err := r.Scan(&f.Source, &f.Destination, &f.Tenant, &f.Key, &f.Version, &f.FailedAt, &f.Error)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("sources: failures: %w", err)
	}
	return out, nil
}

// RetryFailedKeys is RetryFailed of the keys named only, each in its text
// form (a composite key's compact JSON array); a key that has not failed is
// left alone.
func RetryFailedKeys(ctx context.Context, e database.Querier, src string, keys []string) (int64, error) {
	tag, err := e.Exec(ctx, `WITH f AS (DELETE FROM syncer_source_failures WHERE source = $1 AND key = ANY($2) RETURNING num, key, tenant)
		INSERT INTO syncer_changes (source, num, key, deleted, tenant, lane) SELECT $1, num, key, false, f.tenant, `+relogLaneSQL+` FROM f ORDER BY num, key`, src, keys)
	if err != nil {
		return 0, fmt.Errorf("sources: source %s: retry failed keys: %w", src, err)
	}
	return tag.RowsAffected(), nil
}
