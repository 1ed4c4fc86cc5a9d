// Package database opens syncer's connection pool. Its errors name the host
// and database but never the password: pgx masks it in parse errors, and
// connection errors here are rebuilt from the parsed config.
package database

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotMigrated means the schema is missing or older than this binary.
var ErrNotMigrated = errors.New("database is not migrated: run `syncer migrate`")

// Open parses rawURL, opens a pool and checks that the database answers.
func Open(ctx context.Context, rawURL, appName string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("database: bad DATABASE_URL %s: %w", Redact(rawURL), err)
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok && appName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	cfg.ConnConfig.ConnectTimeout = max(cfg.ConnConfig.ConnectTimeout, 0)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: cannot connect to %s: %w", Describe(cfg.ConnConfig), err)
	}
	return pool, nil
}

// Describe names where a config points, without credentials.
func Describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("host=%s port=%d database=%s user=%s", c.Host, c.Port, c.Database, c.User)
}

// Redact removes the password from a URL for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(unparseable)"
	}
	return u.Redacted()
}

// CurrentSchema returns the schema unqualified names resolve to.
func CurrentSchema(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var schema *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("database: current schema: %w", err)
	}
	if schema == nil {
		return "", ErrNotMigrated
	}
	return *schema, nil
}

// CheckMigrated returns ErrNotMigrated unless syncer's schema is at version
// want or later.
func CheckMigrated(ctx context.Context, pool *pgxpool.Pool, want int) error {
	var have *int32
	err := pool.QueryRow(ctx, `SELECT max(version) FROM syncer_migrations`).Scan(&have)
	if err != nil {
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) && pgErr.SQLState() == "42P01" {
			return ErrNotMigrated
		}
		return fmt.Errorf("database: schema version: %w", err)
	}
	if have == nil || int(*have) < want {
		return ErrNotMigrated
	}
	return nil
}
