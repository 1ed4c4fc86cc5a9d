package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// progress is a run's saved state: the last key of the last page finished
// and the result so far.
type progress struct {
	After  string
	Done   bool
	Result Result
}

// saved is Result as the counts column keeps it: Healed included, which
// the output's JSON leaves out.
type saved struct {
	Result
	Healed int64 `json:"healed"`
}

// loadProgress returns the interrupted run of source over the same range
// and sample, or a fresh start. A saved run of other bounds is dropped.
func loadProgress(ctx context.Context, q database.Querier, source string, r Range, sample float64) (progress, error) {
	var after *string
	var counts []byte
	err := q.QueryRow(ctx, `SELECT after_key, counts FROM syncer_verify_runs
		WHERE source = $1 AND from_key = $2 AND to_key = $3 AND sample = $4`,
		source, r.FromKey, r.ToKey, sample).Scan(&after, &counts)
	if errors.Is(err, pgx.ErrNoRows) {
		return progress{}, nil
	}
	if err != nil {
		return progress{}, fmt.Errorf("verify: read progress of %s: %w", source, err)
	}
	var s saved
	if err := json.Unmarshal(counts, &s); err != nil {
		return progress{}, fmt.Errorf("verify: read progress of %s: %w", source, err)
	}
	p := progress{Result: s.Result}
	p.Result.Healed, p.Result.Resumed = s.Healed, true
	if after != nil {
		p.After = *after
	}
	return p, nil
}

// saveProgress records that every key up to after was checked.
func saveProgress(ctx context.Context, q database.Querier, source string, r Range, sample float64, after string, res *Result) error {
	counts, err := json.Marshal(saved{Result: *res, Healed: res.Healed})
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `INSERT INTO syncer_verify_runs AS v (source, from_key, to_key, sample, after_key, counts)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (source) DO UPDATE SET from_key = $2, to_key = $3, sample = $4, after_key = $5,
			counts = $6, updated_at = now(),
			started_at = CASE WHEN v.from_key = $2 AND v.to_key = $3 AND v.sample = $4
				THEN v.started_at ELSE now() END`,
		source, r.FromKey, r.ToKey, sample, after, counts)
	return err
}

// deleteProgress forgets the run of source: it finished.
func deleteProgress(ctx context.Context, q database.Querier, source string) error {
	_, err := q.Exec(ctx, `DELETE FROM syncer_verify_runs WHERE source = $1`, source)
	return err
}
