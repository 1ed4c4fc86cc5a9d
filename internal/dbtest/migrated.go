package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/migrations"
)

// TestSchema is a fresh schema with River's and syncer's migrations
// applied, as River's riverdbtest.TestSchema gives: what most tests start
// from.
type TestSchema struct {
	// Pool is a pool on the schema, closed when the test ends.
	Pool *pgxpool.Pool
	// DSN names the schema in its search_path, for a daemon or a command
	// of the test's own.
	DSN string
	// Name is the schema's name.
	Name string
}

// NewMigrated returns a migrated schema, dropped when the test ends.
func NewMigrated(tb testing.TB) *TestSchema {
	tb.Helper()
	dsn, name := NewSchema(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		tb.Fatalf("dbtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	if _, err := migrations.Up(ctx, pool, nil); err != nil {
		tb.Fatalf("dbtest: migrate %s: %v", name, err)
	}
	return &TestSchema{Pool: pool, DSN: dsn, Name: name}
}
