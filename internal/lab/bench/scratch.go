package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/migrations"
)

// scratch is one migrated scratch schema with a pool on it.
type scratch struct {
	name string
	dsn  string
	pool *pgxpool.Pool
	r    *runner

	dropped bool
}

// newScratch creates and migrates a schema named after the scenario. When
// plain is set, syncer's triggers are disabled: the table is the same, with
// the same indexes, and writers pay for nothing of syncer's.
func (r *runner) newScratch(ctx context.Context, label string, plain bool) (*scratch, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "bench_" + strings.ReplaceAll(label, "-", "_") + "_" + hex.EncodeToString(b[:])
	conn, err := r.connect(ctx, "")
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("bench: create schema: %w", err)
	}
	s := &scratch{name: name, r: r}
	if s.dsn, err = r.schemaURL(name); err != nil {
		s.drop(ctx)
		return nil, err
	}
	if s.pool, err = r.pool(ctx, name, int32(r.sizes.Writers+4)); err != nil {
		s.drop(ctx)
		return nil, err
	}
	if err := s.migrate(ctx, ""); err != nil {
		s.drop(ctx)
		return nil, err
	}
	if plain {
		if _, err := s.pool.Exec(ctx, "ALTER TABLE resources DISABLE TRIGGER USER"); err != nil {
			s.drop(ctx)
			return nil, fmt.Errorf("bench: disable triggers: %w", err)
		}
	}
	return s, nil
}

// migrate applies the migrations to the schema, and installs the sources
// of the configuration file at config when it is set: the lab's own, or,
// with Config.MigrateWithBinary, those of the daemon's binary, run as
// `syncer migrate` (a daemon built at another commit runs on the schema it
// makes for itself).
func (s *scratch) migrate(ctx context.Context, configPath string) error {
	if s.r.cfg.MigrateWithBinary {
		args := []string{"migrate", "--database-url", s.dsn, "--log-level", "warn"}
		if configPath != "" {
			args = append(args, "--config", configPath)
		}
		out, err := exec.CommandContext(ctx, s.r.cfg.Binary, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("bench: %s migrate %s: %w: %s", s.r.cfg.Binary, s.name, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if configPath == "" {
		if _, err := migrations.Up(ctx, s.pool, nil); err != nil {
			return fmt.Errorf("bench: migrate %s: %w", s.name, err)
		}
		return nil
	}
	cfg, err := config.Load(configPath, nil)
	if err != nil {
		return fmt.Errorf("bench: read the configuration: %w", err)
	}
	if _, err := migrations.UpThen(ctx, s.pool, nil, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := sources.Install(ctx, conn, cfg.SourceSpecs())
		return err
	}); err != nil {
		return fmt.Errorf("bench: install the sources: %w", err)
	}
	return nil
}

// drop ends the schema's sessions and drops it, even after cancellation.
func (s *scratch) drop(ctx context.Context) {
	if s.dropped {
		return
	}
	s.dropped = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if s.pool != nil {
		s.pool.Close()
	}
	conn, err := s.r.connect(ctx, "")
	if err != nil {
		s.r.cfg.Logger.WarnContext(ctx, "bench: cannot drop scratch schema", "schema", s.name, "error", err.Error())
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND application_name = $1`, s.name)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.name}.Sanitize()+" CASCADE"); err != nil {
		s.r.cfg.Logger.WarnContext(ctx, "bench: cannot drop scratch schema", "schema", s.name, "error", err.Error())
	}
}

// payloadSQL builds a ~300-byte JSON object for row i; payloadFor is the
// same in Go, for writers that insert one row at a time.
const payloadSQL = `jsonb_build_object('id', i, 'name', 'resource-' || i, 'kind', 'bench', 'data', repeat(md5(i::text), 7))`

var filler = strings.Repeat("0123456789abcdef", 14) // 224 bytes, as repeat(md5, 7)

func payloadFor(i int64) []byte {
	return fmt.Appendf(nil, `{"id": %d, "name": "resource-%d", "kind": "bench", "data": "%s"}`, i, i, filler)
}

// preload inserts n rows in one statement, then vacuums and analyzes the
// table and checkpoints, so every scenario (and its baseline) starts from
// the same state.
func (s *scratch) preload(ctx context.Context, n int) error {
	if err := s.exec(ctx, "preload", `INSERT INTO resources (payload) SELECT `+payloadSQL+` FROM generate_series(1, $1) i`, n); err != nil {
		return err
	}
	return s.settle(ctx, "resources")
}

// settle vacuums and analyzes tables, then checkpoints: what a preload
// wrote is on disk before the phase measured next. Without the checkpoint,
// one the preload's WAL set off ran during one side's measurement and not
// the other's, and its writes, with the full-page images that every first
// change of a page logs after it, moved one drain of 100,000 tombstones
// from 105,000 to 190,000 a second from run to run. A role not allowed to
// checkpoint only loses that: the bench says so in its notes.
func (s *scratch) settle(ctx context.Context, tables ...string) error {
	for _, t := range tables {
		if err := s.exec(ctx, "vacuum", `VACUUM (ANALYZE) `+pgx.Identifier{t}.Sanitize()); err != nil {
			return err
		}
	}
	_, err := s.pool.Exec(ctx, `CHECKPOINT`)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		s.r.noCheckpoint.Do(func() {
			s.r.note("the role may not CHECKPOINT (PostgreSQL 15 grants it to pg_checkpoint): the server's own checkpoints fall on the measured phases at random, and figures vary more")
		})
		return nil
	}
	if err != nil {
		return fmt.Errorf("bench: checkpoint: %w", err)
	}
	return nil
}

func (s *scratch) exec(ctx context.Context, what, sql string, args ...any) error {
	if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("bench: %s: %w", what, err)
	}
	return nil
}

func (s *scratch) anyPending(ctx context.Context) (bool, error) {
	var ok bool
	// The first pending id, not EXISTS, as resources.AnyPending: an
	// EXISTS with statistics from before the drain is planned as a
	// sequential scan that reads every marked row first, 33-558 ms a call
	// on loaded cores, counted in the drain's time of both binaries.
	err := s.pool.QueryRow(ctx, `SELECT (SELECT id FROM resources WHERE synced_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT 1) IS NOT NULL`).Scan(&ok)
	return ok, err
}

// waitDrained waits until the fake accepted want items and no row is
// pending, and returns when the table was first seen drained.
func (s *scratch) waitDrained(ctx context.Context, fake *fakethirdparty.Server, want int64, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if fake.Stats().ItemsAccepted >= want {
			pending, err := s.anyPending(ctx)
			if err != nil {
				return time.Time{}, fmt.Errorf("bench: wait for drain: %w", err)
			}
			if !pending {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("bench: not drained after %s: the fake accepted %d of %d items", limit, fake.Stats().ItemsAccepted, want)
		case <-t.C:
		}
	}
}
