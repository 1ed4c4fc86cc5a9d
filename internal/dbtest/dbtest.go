// Package dbtest gives each test its own PostgreSQL schema, so tests that
// commit, LISTEN or run DDL can run in parallel with -race and leave nothing
// behind. A test that cannot reach PostgreSQL fails: CI always has one, and a
// skipped database test hides exactly the failures this project is about.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// URLDefault is used when TEST_DATABASE_URL is not set.
const URLDefault = "postgres://127.0.0.1:5432/test"

// URL returns the base database URL for tests.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return URLDefault
}

// NewSchema creates a fresh schema and returns a database URL whose
// search_path names only that schema, plus the schema's name. The schema is
// dropped with everything in it when the test ends.
func NewSchema(tb testing.TB) (dsn, schema string) {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "t_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		tb.Fatalf("dbtest: connect to %s (set TEST_DATABASE_URL): %v", redact(URL()), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("dbtest: create schema: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, URL())
		if err != nil {
			tb.Errorf("dbtest: connect for cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		// Sessions of daemons under test may still hold locks on the
		// schema's tables; end them so the drop cannot hang.
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND application_name = $1`, schema)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("dbtest: drop schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(URL())
	if err != nil {
		tb.Fatalf("dbtest: parse url: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	// Tagging the sessions lets cleanup find and end them.
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// NewPool returns a pool on a fresh schema, closed when the test ends.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	dsn, _ := NewSchema(tb)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("dbtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
