package resources

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/database"
)

// HeldOf returns those of ids that are a row or a tombstone now: `syncer
// verify` asks it of the ids the row's story says were deleted, since the
// ones still here are checked with the table, and the others (their
// tombstones purged) only through the story.
func HeldOf(ctx context.Context, q database.Querier, ids []int64) ([]int64, error) {
	return idsOf(ctx, q, "held of", `SELECT id FROM resources WHERE id = ANY($1)
		UNION ALL SELECT id FROM syncer_tombstones WHERE id = ANY($1)`, ids)
}

// Rebury writes a pending tombstone for each of ids that is neither a row
// nor a tombstone now, at a version one above versions[i] (the tombstone
// the third party accepted before, which the purge forgot): `syncer
// verify --heal` of a zombie whose tombstone is gone from the table. The
// export path sends it; it returns how many it wrote. Run it in a
// transaction, with Resend's generation bump after it.
func Rebury(ctx context.Context, q database.Querier, ids, versions []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := q.Exec(ctx, `INSERT INTO syncer_tombstones (id, version, created_at)
		SELECT u.id, u.version + 1, now() FROM unnest($1::bigint[], $2::bigint[]) AS u(id, version)
		WHERE NOT EXISTS (SELECT 1 FROM resources r WHERE r.id = u.id)
		ON CONFLICT (id) DO NOTHING`, ids, versions)
	if err != nil {
		return 0, fmt.Errorf("resources: rebury: %w", err)
	}
	if tag.RowsAffected() > 0 {
		if err := requeued(ctx, q, ids); err != nil {
			return 0, err
		}
	}
	return tag.RowsAffected(), nil
}
