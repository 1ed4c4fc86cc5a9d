package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/config"
)

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is what marks need; marks run inside the lock's transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Beginner starts transactions: a pool or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// KeyKind is the kind of a source's key, which decides its order and how
// its text form is read back.
type KeyKind string

// The kinds of keys a source may have.
const (
	// KeyInteger is smallint, integer or bigint (or a domain over one):
	// read in numeric order.
	KeyInteger KeyKind = "integer"
	// KeyText is text or varchar (or a domain over one): read in byte order.
	KeyText KeyKind = "text"
	// KeyUUID is uuid: read in the uuid's order (its text's byte order).
	KeyUUID KeyKind = "uuid"
)

// SnapshotState is where a source's snapshot is.
type SnapshotState string

// The states of a snapshot.
const (
	// SnapshotPending: the source was installed; no chunk is logged yet.
	SnapshotPending SnapshotState = "pending"
	// SnapshotRunning: some chunks are logged.
	SnapshotRunning SnapshotState = "running"
	// SnapshotDone: every row that existed at the start is logged.
	SnapshotDone SnapshotState = "done"
	// SnapshotSkipped: the source said snapshot: false.
	SnapshotSkipped SnapshotState = "skipped"
)

// Source is an installed source, as `syncer migrate` resolved it: its
// table is schema-qualified, its key's kind known.
type Source struct {
	// Name is the source's name (config.Source.Name).
	Name string
	// Schema and Table name the application's table.
	Schema, Table string
	// Key is its single-column primary key.
	Key string
	// Kind is the key's kind.
	Kind KeyKind
	// KeyType is the key's SQL type, as PostgreSQL prints it.
	KeyType string
	// Columns are the payload's columns; nil means the whole row.
	Columns []string
	// Destination names the destination, as the file did at install time.
	Destination string

	// collation is the key's collation, quoted, for text keys: comparing
	// with it lets the key's own index find the row.
	collation string
	sql       statements
}

type statements struct {
	pendingFirst, pendingAfter   string
	snapshotFirst, snapshotAfter string
}

// QualifiedTable is schema.table, for messages.
func (s *Source) QualifiedTable() string { return s.Schema + "." + s.Table }

func (s *Source) table() string { return pgx.Identifier{s.Schema, s.Table}.Sanitize() }

// ErrNotInstalled is wrapped by Resolve's error for a configured source
// that `syncer migrate --config` has not installed as configured.
var ErrNotInstalled = errors.New("not installed as configured: run syncer migrate with this configuration")

// Load returns every installed source, by name.
func Load(ctx context.Context, q Querier) ([]*Source, error) {
	rows, err := q.Query(ctx, `SELECT name, schema_name, table_name, key_column, key_kind, key_type, columns, destination
		FROM syncer_sources ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sources: load: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Source, error) {
		s := &Source{}
		err := r.Scan(&s.Name, &s.Schema, &s.Table, &s.Key, &s.Kind, &s.KeyType, &s.Columns, &s.Destination)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sources: load: %w", err)
	}
	for _, s := range out {
		if err := s.prepare(ctx, q); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Resolve returns the installed sources that cfg configures, in cfg's
// order. A configured source that is not installed, or was installed with
// another table, key, columns or destination, is an error wrapping
// ErrNotInstalled that names it: the daemon must not export what migrate
// has not set up.
func Resolve(ctx context.Context, q Querier, cfg *config.Config) ([]*Source, error) {
	all, err := Load(ctx, q)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Source{}
	for _, s := range all {
		byName[s.Name] = s
	}
	out := make([]*Source, 0, len(cfg.Sources))
	for _, c := range cfg.Sources {
		s := byName[c.Name]
		var differs string
		switch {
		case s == nil:
			return nil, fmt.Errorf("sources: source %s: %w", c.Name, ErrNotInstalled)
		case s.Table != c.Table || (c.Schema != "" && s.Schema != c.Schema):
			differs = "table"
		case s.Key != c.Key:
			differs = "key"
		case !slices.Equal(s.Columns, c.Columns):
			differs = "columns"
		case s.Destination != c.Destination:
			differs = "destination"
		}
		if differs != "" {
			return nil, fmt.Errorf("sources: source %s: its %s changed, so it is %w", c.Name, differs, ErrNotInstalled)
		}
		out = append(out, s)
	}
	return out, nil
}

// prepare looks up what the statements need and builds them once.
func (s *Source) prepare(ctx context.Context, q Querier) error {
	if s.Kind == KeyText {
		// A table dropped since install has no collation to find: Pending
		// then reports the table gone.
		var nsp, coll *string
		err := q.QueryRow(ctx, `SELECT cn.nspname, co.collname FROM pg_attribute a
			JOIN pg_collation co ON co.oid = a.attcollation
			JOIN pg_namespace cn ON cn.oid = co.collnamespace
			WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`,
			s.table(), s.Key).Scan(&nsp, &coll)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			s.collation = `"default"`
		case err != nil:
			return fmt.Errorf("sources: source %s: key collation: %w", s.Name, err)
		default:
			s.collation = pgx.Identifier{*nsp, *coll}.Sanitize()
		}
	}
	s.sql = s.build()
	return nil
}

// maxBuildArgs is how many columns one jsonb_build_object call takes: a
// function takes at most 100 arguments, two a column.
const maxBuildArgs = 50

// build writes the source's statements. Identifiers are quoted; every value
// (the source's name, limits, cursors, the payload's field names) is a
// parameter.
func (s *Source) build() statements {
	return statements{
		pendingFirst:  s.pendingSQL(false),
		pendingAfter:  s.pendingSQL(true),
		snapshotFirst: s.snapshotSQL(false),
		snapshotAfter: s.snapshotSQL(true),
	}
}

// pendingSQL reads a batch: $1 the source, $2 the limit, $3 the largest
// payload (its stored size: larger payloads are measured, not returned),
// after the cursor ($4 num, $5 key), then the payload's field names as one
// text[].
func (s *Source) pendingSQL(after bool) string {
	key := "t." + pgx.Identifier{s.Key}.Sanitize()
	cond, names := "", "$4"
	if after {
		cond, names = " AND (c.num, c.key) > ($4::bigint, $5::text)", "$6"
	}

	// The payload: the whole row, or the configured columns under their
	// names.
	payload := "to_jsonb(t)"
	if s.Columns != nil {
		var groups []string
		for start := 0; start < len(s.Columns); start += maxBuildArgs {
			var args []string
			for i := start; i < min(start+maxBuildArgs, len(s.Columns)); i++ {
				args = append(args, "("+names+"::text[])["+strconv.Itoa(i+1)+"], t."+pgx.Identifier{s.Columns[i]}.Sanitize())
			}
			groups = append(groups, "jsonb_build_object("+strings.Join(args, ", ")+")")
		}
		payload = strings.Join(groups, " || ")
	}

	// The key's text form, read back as the key's type so that the
	// table's primary key index finds the row.
	var match string
	switch s.Kind {
	case KeyInteger:
		match = key + " = k.num"
	case KeyUUID:
		match = key + " = k.key::uuid"
	default:
		match = key + " = k.key::text COLLATE " + s.collation
	}

	// The row is looked up per key, by its primary key (LIMIT 1 keeps the
	// planner from turning the lookups into a scan of the whole table, which
	// its estimates can prefer for a table of some 100,000 rows). No row:
	// the key was deleted.
	return `SELECT k.key, k.version, r.payload IS NULL,
			CASE WHEN pg_column_size(r.payload) <= $3 THEN r.payload END, coalesce(pg_column_size(r.payload), 0)
		FROM (SELECT c.num, c.key, max(c.seq) AS version FROM syncer_changes c
			WHERE c.source = $1` + cond + `
			GROUP BY c.num, c.key ORDER BY c.num, c.key LIMIT $2) k
		LEFT JOIN LATERAL (SELECT ` + payload + ` AS payload FROM ` + s.table() + ` t WHERE ` + match + ` LIMIT 1) r ON true
		ORDER BY k.num, k.key`
}

// snapshotSQL logs a chunk of existing rows in the key's own order, from
// the table's primary key, under a share lock: a writer of one of these
// rows waits for the chunk's commit, so its change comes after the
// snapshot's, and the snapshot waits for a writer that came first. $1 the
// source, $2 the chunk, $3 the cursor. It returns the rows logged and the
// last key.
func (s *Source) snapshotSQL(after bool) string {
	key := "t." + pgx.Identifier{s.Key}.Sanitize()
	var cast, num string
	switch s.Kind {
	case KeyInteger:
		cast, num = "bigint", "r.k::bigint"
	case KeyUUID:
		cast, num = "uuid", "0"
	default:
		cast, num = "text", "0"
	}
	cond := ""
	if after {
		cond = " WHERE " + key + " > $3::" + cast
	}
	return `WITH r AS (SELECT ` + key + ` AS k FROM ` + s.table() + ` t` + cond + ` ORDER BY ` + key + ` LIMIT $2 FOR SHARE OF t),
		ins AS (INSERT INTO syncer_changes (source, num, key, deleted) SELECT $1, ` + num + `, r.k::text, false FROM r ORDER BY r.k)
		SELECT count(*), (SELECT r.k::text FROM r ORDER BY r.k DESC LIMIT 1) FROM r`
}

// objectHash names a source's triggers and capture function: a hash of
// syncer's schema and the source's name, so that two installations (two
// schemas) exporting one table, or two sources of one table, never share a
// trigger, and a source's triggers are found again from its name.
func objectHash(schema, name string) string {
	h := sha256.Sum256([]byte(schema + "\x00" + name))
	return hex.EncodeToString(h[:8])
}

// triggerOps are the suffixes of a source's triggers.
var triggerOps = []string{"insert", "update", "delete", "truncate"}

func triggerNames(hash string) []string {
	out := make([]string, len(triggerOps))
	for i, op := range triggerOps {
		out[i] = "syncer_" + hash + "_" + op
	}
	return out
}

func functionName(hash string) string { return "syncer_capture_" + hash }
