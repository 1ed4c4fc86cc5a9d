package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Pending says what Up would apply to the schema pool's search_path points
// at, and changes nothing: River's versions and syncer's migrations not
// yet applied, in order. A schema never migrated has them all pending.
func Pending(ctx context.Context, pool *pgxpool.Pool) (river []int, ours []Migration, err error) {
	var schema *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, nil, fmt.Errorf("migrate: current schema: %w", err)
	}
	if schema == nil {
		return nil, nil, errors.New("migrate: no current schema: the search_path names no existing schema")
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: *schema})
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: river: %w", err)
	}
	have := map[int]bool{}
	existing, err := migrator.ExistingVersions(ctx)
	if err != nil && !undefinedTable(err) {
		return nil, nil, fmt.Errorf("migrate: river versions: %w", err)
	}
	for _, m := range existing {
		have[m.Version] = true
	}
	for _, m := range migrator.AllVersions() {
		if !have[m.Version] {
			river = append(river, m.Version)
		}
	}

	all, err := All()
	if err != nil {
		return nil, nil, err
	}
	rows, err := pool.Query(ctx, `SELECT version FROM `+pgx.Identifier{*schema}.Sanitize()+`.syncer_migrations`)
	var applied []int32
	if err == nil {
		applied, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	if err != nil && !undefinedTable(err) {
		return nil, nil, fmt.Errorf("migrate: read versions: %w", err)
	}
	done := map[int]bool{}
	for _, v := range applied {
		done[int(v)] = true
	}
	for _, m := range all {
		if !done[m.Version] {
			ours = append(ours, m)
		}
	}
	return river, ours, nil
}

func undefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
