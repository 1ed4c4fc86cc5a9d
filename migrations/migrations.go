// Package migrations holds syncer's SQL schema, embedded in the binary, and
// applies it together with River's own migrations.
//
// Guarantees: each migration runs in one transaction together with the row
// that records its version, so a migration is either wholly applied or not at
// all; concurrent runs (two deploys, a daemon starting while `syncer migrate`
// runs) serialise on an advisory lock and the second one changes nothing.
// Migrations only add objects (and copy rows into what they add, as 015
// does), so running them under live daemons is safe.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/syncer-dev/syncer/internal/locks"
)

//go:embed *.sql
var files embed.FS

// lockKey serialises concurrent migrators across processes; the locks
// package owns every key.
const lockKey = locks.MigrateKey

// Channel is the LISTEN/NOTIFY channel the outbox trigger notifies for the
// tables in schema. Including the schema keeps two installations in one
// database from waking each other.
func Channel(schema string) string {
	c := "syncer_outbox." + schema
	if len(c) > 63 { // NAMEDATALEN - 1
		c = c[:63]
	}
	return c
}

// SourceOpPrefix starts the op of every outbox event of a configured source
// ('source:<name>'): the capture triggers write it, the relay routes on it.
const SourceOpPrefix = "source:"

// SourceOp is the op of an outbox event of configured source name.
func SourceOp(name string) string { return SourceOpPrefix + name }

// GateOpen is the condition of the outbox gate, as SQL, for the tables in
// schema: a statement appends an event and notifies only while the daemon
// waits for one (armed) and some relay's lease says it is alive to hear it.
// Every trigger that appends events reads it: the migrations' through
// {{gate_open}}, the sources' capture functions (internal/sources, which
// must bump its captureVersion when this changes). It is read inline rather
// than through a function: a call would cost the writer as much as the read.
// Its operator and function are pg_catalog's by name, so it means the same
// whatever the writer's search_path (the triggers run as syncer's owner
// and pin no path: migration 016).
func GateOpen(schema string) string {
	return "(SELECT g.armed AND g.lease_until OPERATOR(pg_catalog.>) pg_catalog.now() FROM " + pgx.Identifier{schema, "syncer_gate"}.Sanitize() + " g)"
}

// signalled names the transaction-local setting by which resources'
// triggers note that the transaction appended its outbox event and
// notified (migration 030): one per schema, as payloadChanged.
func signalled(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	return "syncer.resources_signalled_" + hex.EncodeToString(sum[:8])
}

// payloadChanged names the transaction-local setting by which the
// resources' row trigger tells its statement trigger that a statement
// changed a payload (migration 018): one per schema, so that two
// installations in one database do not tell each other.
func payloadChanged(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	return "syncer.payload_changed_" + hex.EncodeToString(sum[:8])
}

// Migration is one embedded SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the project's migrations in order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(name, "_")
		if !ok || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migrations: bad file name %q", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migrations: bad version in %q: %w", name, err)
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Result says what Up did.
type Result struct {
	Schema       string
	RiverApplied []int
	Applied      []Migration
}

// Up brings the schema that pool's search_path points at (normally public)
// to the current version: River's migrations first, then syncer's.
func Up(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (*Result, error) {
	return UpThen(ctx, pool, logger, nil)
}

// Then is work that must follow the migrations under the same lock, such
// as installing the configured sources' triggers: it runs on the
// migration's connection, whose search_path names the migrated schema, so
// concurrent migrates serialise on it too. It lives outside this package,
// which stays free of runtime imports.
type Then func(ctx context.Context, conn *pgx.Conn) error

// UpThen is Up followed by then, if not nil, while the migration lock is
// still held. An error of then is returned as it is, after the result of
// the migrations.
func UpThen(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, then Then) (*Result, error) {
	return upTo(ctx, pool, logger, then, 0)
}

// upTo is UpThen that stops after syncer's migration version last (0: the
// latest). Only tests stop early: to build a schema as a previous release
// left it and prove what a later migration makes of its rows.
func upTo(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, then Then, last int) (*Result, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()

	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, fmt.Errorf("migrate: current schema: %w", err)
	}
	if schema == "" {
		return nil, errors.New("migrate: no current schema: the search_path names no existing schema")
	}

	unlock, err := migrationLock(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer unlock()

	res := &Result{Schema: schema}

	// River logs a line per migration; one summary line of ours is enough.
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler), Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	rr, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	for _, v := range rr.Versions {
		res.RiverApplied = append(res.RiverApplied, v.Version)
	}
	if len(res.RiverApplied) > 0 {
		logger.InfoContext(ctx, "migrate: applied River migrations", slog.Any("versions", res.RiverApplied), slog.String("schema", schema))
	}

	all, err := All()
	if err != nil {
		return nil, err
	}
	qschema := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+qschema+`.syncer_migrations (
		version    integer PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("migrate: version table: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, `SELECT version FROM `+qschema+`.syncer_migrations`)
	if err != nil {
		return nil, fmt.Errorf("migrate: read versions: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("migrate: read versions: %w", err)
	}
	for _, v := range versions {
		applied[int(v)] = true
	}

	replacer := strings.NewReplacer(
		"{{schema}}", qschema,
		"{{channel}}", quoteLiteral(Channel(schema)),
		"{{gate_open}}", GateOpen(schema),
		"{{payload_changed}}", quoteLiteral(payloadChanged(schema)),
		"{{signalled}}", quoteLiteral(signalled(schema)),
	)
	for _, m := range all {
		if last > 0 && m.Version > last {
			break
		}
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, replacer.Replace(m.SQL)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+qschema+`.syncer_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("migrate: %03d_%s: %w", m.Version, m.Name, err)
		}
		logger.InfoContext(ctx, "migrate: applied", slog.Int("version", m.Version), slog.String("name", m.Name), slog.String("schema", schema))
		res.Applied = append(res.Applied, m)
	}
	if then != nil {
		if err := then(ctx, conn.Conn()); err != nil {
			return res, err
		}
	}
	return res, nil
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// migrationLock takes the migration lock (lockKey) and returns what gives
// it back. The lock is a transaction's, held by a transaction left open on
// a connection of its own until the migrations are over: through a pooler
// in transaction mode (no SYNCER_DIRECT_URL) a session lock would be taken
// on one server session and the migrations run on others, while an open
// transaction keeps its server session, and the lock, for the client. It
// excludes a migrator of an older release, whose session lock is on the
// same key. Its idle timeout is off for the transaction alone: it sits
// idle while the migrations run.
func migrationLock(ctx context.Context, pool *pgxpool.Pool) (func(), error) {
	lconn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire the lock's connection: %w", err)
	}
	tx, err := lconn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT set_config('idle_in_transaction_session_timeout', '0', true), pg_advisory_xact_lock($1)", lockKey)
	}
	if err != nil {
		if tx != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
		lconn.Release()
		return nil, fmt.Errorf("migrate: take migration lock: %w", err)
	}
	return func() {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		lconn.Release()
	}, nil
}
