package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/migrations"
)

// InstallLockTimeout bounds how long Install waits for the lock that
// creating a trigger takes on an application's table (it waits for the
// table's open write transactions, and writers queue behind it): past it,
// migrate fails rather than stall the application's writers.
const InstallLockTimeout = 10 * time.Second

// captureVersion is written into every capture function, so that an
// installation made by an older syncer is recognised and replaced.
const captureVersion = "syncer capture v2"

// Action is what Install did to a source.
type Action string

// The actions of Install.
const (
	Installed Action = "installed"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
	Removed   Action = "removed"
)

// Change is what Install did to one source.
type Change struct {
	Source string
	Action Action
	// Detail says what changed, for Updated.
	Detail string
}

// InstallResult is what Install did.
type InstallResult struct {
	// Schema is syncer's schema.
	Schema  string
	Changes []Change
}

// Changed reports whether Install changed anything.
func (r *InstallResult) Changed() bool {
	for _, c := range r.Changes {
		if c.Action != Unchanged {
			return true
		}
	}
	return false
}

// SourceError is a source that cannot be installed: its table is missing,
// has no usable primary key, lacks a configured column, or the database
// refused the triggers. It names the source.
type SourceError struct {
	Source string
	Err    error
}

func (e *SourceError) Error() string { return "source " + e.Source + ": " + e.Err.Error() }

func (e *SourceError) Unwrap() error { return e.Err }

// Install makes the database export what cfg configures, and nothing else.
// It runs in syncer's schema (the connection's current schema), after the
// embedded migrations, under the migration lock (migrations.UpThen):
//
//   - every configured source's table is checked first (it exists, its
//     primary key is the configured key, a single column of an integer,
//     text, varchar or uuid type, the configured columns exist); if one is
//     wrong nothing is changed, and the error names each wrong source;
//   - each source's capture function and triggers are created, or replaced
//     when they differ from this version's, in a transaction of its own, and
//     the source is recorded in syncer_sources, its snapshot pending (or
//     skipped with snapshot: false); a source whose table or key changed
//     starts afresh;
//   - a source no longer configured loses its triggers, its function, its
//     pending changes and failures, and its row.
//
// It is idempotent: run again with the same file it changes nothing and
// takes no lock on an application's table. It never adds or alters a
// column of an application's table.
func Install(ctx context.Context, db Beginner, cfg *config.Config) (*InstallResult, error) {
	res := &InstallResult{}
	var resolved []*Source
	var installed []string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&res.Schema); err != nil {
			return fmt.Errorf("sources: current schema: %w", err)
		}
		var problems []error
		for _, c := range cfg.Sources {
			s, err := inspect(ctx, tx, c)
			if err != nil {
				var se *SourceError
				if !errors.As(err, &se) {
					return err
				}
				problems = append(problems, err)
				continue
			}
			resolved = append(resolved, s)
		}
		if len(problems) > 0 {
			return joinOneLine(problems)
		}
		rows, err := tx.Query(ctx, "SELECT name FROM syncer_sources ORDER BY name")
		if err != nil {
			return fmt.Errorf("sources: installed sources: %w", err)
		}
		installed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("sources: installed sources: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, s := range resolved {
		ch, err := installOne(ctx, db, res.Schema, s, cfg.Sources[i])
		if err != nil {
			return res, &SourceError{Source: s.Name, Err: err}
		}
		res.Changes = append(res.Changes, ch)
	}
	for _, name := range installed {
		if cfg.Source(name) != nil {
			continue
		}
		if err := remove(ctx, db, res.Schema, name); err != nil {
			return res, &SourceError{Source: name, Err: err}
		}
		res.Changes = append(res.Changes, Change{Source: name, Action: Removed})
	}
	return res, nil
}

// joinOneLine joins errors with "; ", since the command line prints one
// line.
type joinedError []error

func (e joinedError) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e joinedError) Unwrap() []error { return e }

func joinOneLine(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return joinedError(errs)
}

// inspect resolves a configured source against the catalog and checks
// that it can be installed. Problems of the table are *SourceError.
func inspect(ctx context.Context, q Querier, c *config.Source) (*Source, error) {
	bad := func(format string, args ...any) error {
		return &SourceError{Source: c.Name, Err: fmt.Errorf(format, args...)}
	}
	ident := pgx.Identifier{c.Table}
	if c.Schema != "" {
		ident = pgx.Identifier{c.Schema, c.Table}
	}
	s := &Source{Name: c.Name, Key: c.Key, Columns: c.Columns, Destination: c.Destination}
	var oid uint32
	var kind string
	err := q.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname, c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, ident.Sanitize()).
		Scan(&oid, &s.Schema, &s.Table, &kind)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && c.Schema == "":
		var path string
		_ = q.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path)
		return nil, bad("table %s does not exist (search_path: %s)", c.Table, path)
	case errors.Is(err, pgx.ErrNoRows):
		return nil, bad("table %s does not exist", c.QualifiedTable())
	case err != nil:
		return nil, fmt.Errorf("sources: source %s: find table: %w", c.Name, err)
	case kind != "r" && kind != "p":
		return nil, bad("%s is not a table (relkind %s): only a table or a partitioned table can be a source", s.QualifiedTable(), kind)
	}

	rows, err := q.Query(ctx, `SELECT a.attname, a.atttypid, format_type(a.atttypid, a.atttypmod)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = $1 AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)`, oid)
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: primary key: %w", c.Name, err)
	}
	type pkCol struct {
		name    string
		typ     uint32
		typName string
	}
	pk, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pkCol, error) {
		var p pkCol
		err := r.Scan(&p.name, &p.typ, &p.typName)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: primary key: %w", c.Name, err)
	}
	switch {
	case len(pk) == 0:
		return nil, bad("table %s has no primary key: a source needs a single-column primary key (key: %s)", s.QualifiedTable(), c.Key)
	case len(pk) > 1:
		names := make([]string, len(pk))
		for i, p := range pk {
			names[i] = p.name
		}
		return nil, bad("the primary key of %s has %d columns (%s): a source needs a single-column primary key", s.QualifiedTable(), len(pk), strings.Join(names, ", "))
	case pk[0].name != c.Key:
		return nil, bad("key: %s is not the primary key of %s (its primary key is %s)", c.Key, s.QualifiedTable(), pk[0].name)
	}
	s.KeyType = pk[0].typName
	base, err := baseType(ctx, q, pk[0].typ)
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: key type: %w", c.Name, err)
	}
	switch base {
	case 20, 21, 23: // int8, int2, int4
		s.Kind = KeyInteger
	case 25, 1043: // text, varchar
		s.Kind = KeyText
	case 2950:
		s.Kind = KeyUUID
	default:
		return nil, bad("key: %s is of type %s: a key must be an integer (smallint, integer, bigint), text, varchar or uuid", c.Key, s.KeyType)
	}

	if c.Columns != nil {
		rows, err := q.Query(ctx, `SELECT c FROM unnest($2::text[]) WITH ORDINALITY AS u(c, i)
			WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = $1 AND a.attname = u.c AND a.attnum > 0 AND NOT a.attisdropped)
			ORDER BY i`, oid, c.Columns)
		if err != nil {
			return nil, fmt.Errorf("sources: source %s: columns: %w", c.Name, err)
		}
		missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("sources: source %s: columns: %w", c.Name, err)
		}
		if len(missing) > 0 {
			return nil, bad("columns: %s has no column %s", s.QualifiedTable(), strings.Join(missing, ", "))
		}
	}
	return s, nil
}

// baseType follows domains down to their base type.
func baseType(ctx context.Context, q Querier, typ uint32) (uint32, error) {
	for range 16 {
		var kind string
		var base uint32
		if err := q.QueryRow(ctx, "SELECT typtype::text, typbasetype FROM pg_type WHERE oid = $1", typ).Scan(&kind, &base); err != nil {
			return 0, err
		}
		if kind != "d" {
			return typ, nil
		}
		typ = base
	}
	return typ, nil
}

// installed is a source's row in syncer_sources.
type installedRow struct {
	schema, table, key string
	kind               KeyKind
	keyType            string
	columns            []string
	destination        string
}

// installOne installs one source in a transaction of its own, so that the
// lock its triggers take on the table is held for as short a time as
// possible.
func installOne(ctx context.Context, db Beginner, schema string, s *Source, c *config.Source) (Change, error) {
	ch := Change{Source: s.Name, Action: Unchanged}
	hash := objectHash(schema, s.Name)
	fn := pgx.Identifier{schema, functionName(hash)}.Sanitize()
	body := captureBody(schema, s)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", InstallLockTimeout.Milliseconds())); err != nil {
			return err
		}
		var prev installedRow
		err := tx.QueryRow(ctx, `SELECT schema_name, table_name, key_column, key_kind, key_type, columns, destination
			FROM syncer_sources WHERE name = $1 FOR UPDATE`, s.Name).
			Scan(&prev.schema, &prev.table, &prev.key, &prev.kind, &prev.keyType, &prev.columns, &prev.destination)
		exists := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read syncer_sources: %w", err)
		}
		// Another table or key: what is pending names keys of the old one.
		moved := exists && (prev.schema != s.Schema || prev.table != s.Table || prev.key != s.Key || prev.kind != s.Kind)
		if moved {
			if err := dropTriggers(ctx, tx, hash, pgx.Identifier{prev.schema, prev.table}); err != nil {
				return err
			}
			if err := forget(ctx, tx, s.Name); err != nil {
				return err
			}
		}

		current, err := triggersCurrent(ctx, tx, schema, hash, s, body)
		if err != nil {
			return err
		}
		if !current {
			if err := createTriggers(ctx, tx, fn, hash, s, body); err != nil {
				return err
			}
		}

		state := SnapshotPending
		if !c.Snapshot {
			state = SnapshotSkipped
		}
		switch {
		case !exists:
			ch.Action = Installed
			_, err = tx.Exec(ctx, `INSERT INTO syncer_sources (name, schema_name, table_name, key_column, key_kind, key_type, columns, destination, snapshot_state)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
				s.Name, s.Schema, s.Table, s.Key, s.Kind, s.KeyType, s.Columns, s.Destination, state)
		case moved:
			ch.Action, ch.Detail = Updated, "table or key changed: pending work dropped, snapshot restarted"
			_, err = tx.Exec(ctx, `UPDATE syncer_sources SET schema_name = $2, table_name = $3, key_column = $4, key_kind = $5,
					key_type = $6, columns = $7, destination = $8, snapshot_state = $9, snapshot_after = NULL,
					snapshot_rows = 0, snapshot_total = 0, snapshot_started_at = NULL, snapshot_done_at = NULL,
					installed_at = now(), updated_at = now()
				WHERE name = $1`,
				s.Name, s.Schema, s.Table, s.Key, s.Kind, s.KeyType, s.Columns, s.Destination, state)
		case prev.keyType != s.KeyType || !slices.Equal(prev.columns, s.Columns) || prev.destination != s.Destination:
			ch.Action, ch.Detail = Updated, "columns or destination changed"
			_, err = tx.Exec(ctx, `UPDATE syncer_sources SET key_type = $2, columns = $3, destination = $4, updated_at = now()
				WHERE name = $1`, s.Name, s.KeyType, s.Columns, s.Destination)
		case !current:
			ch.Action, ch.Detail = Updated, "triggers replaced"
		}
		if err != nil {
			return fmt.Errorf("record in syncer_sources: %w", err)
		}
		return nil
	})
	return ch, err
}

// triggersCurrent reports whether the source's capture function is this
// version's and its four triggers exist, enabled, on its table and call
// it.
func triggersCurrent(ctx context.Context, q Querier, schema, hash string, s *Source, body string) (bool, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM pg_trigger tg JOIN pg_proc p ON p.oid = tg.tgfoid
		WHERE tg.tgrelid = to_regclass($1) AND tg.tgname = ANY ($2) AND tg.tgenabled <> 'D'
			AND p.oid = to_regprocedure($3) AND p.prosrc = $4`,
		s.table(), triggerNames(hash), pgx.Identifier{schema, functionName(hash)}.Sanitize()+"()", body).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read triggers: %w", err)
	}
	return n == len(triggerOps), nil
}

// createTriggers creates or replaces the capture function and the four
// triggers. Dropping and creating in one transaction is atomic for
// writers.
func createTriggers(ctx context.Context, tx pgx.Tx, fn, hash string, s *Source, body string) error {
	// SECURITY DEFINER: the application's roles need no privilege on
	// syncer's tables; search_path is pinned because the body names every
	// object with its schema.
	if _, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION `+fn+`() RETURNS trigger
		LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS `+dollarQuote(body)); err != nil {
		return fmt.Errorf("create capture function: %w", err)
	}
	tbl := s.table()
	if err := dropTriggers(ctx, tx, hash, pgx.Identifier{s.Schema, s.Table}); err != nil {
		return err
	}
	names := triggerNames(hash)
	arg := quoteLiteral(s.Name)
	defs := []string{
		`AFTER INSERT ON ` + tbl + ` REFERENCING NEW TABLE AS syncer_new FOR EACH STATEMENT`,
		`AFTER UPDATE ON ` + tbl + ` REFERENCING OLD TABLE AS syncer_old NEW TABLE AS syncer_new FOR EACH STATEMENT`,
		`AFTER DELETE ON ` + tbl + ` REFERENCING OLD TABLE AS syncer_old FOR EACH STATEMENT`,
		`BEFORE TRUNCATE ON ` + tbl + ` FOR EACH STATEMENT`,
	}
	for i, def := range defs {
		if _, err := tx.Exec(ctx, `CREATE TRIGGER `+pgx.Identifier{names[i]}.Sanitize()+` `+def+` EXECUTE FUNCTION `+fn+`(`+arg+`)`); err != nil {
			return fmt.Errorf("create trigger %s: %w", names[i], err)
		}
	}
	return nil
}

// dropTriggers drops a source's triggers from a table, if the table still
// exists.
func dropTriggers(ctx context.Context, tx pgx.Tx, hash string, table pgx.Identifier) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table.Sanitize()).Scan(&exists); err != nil {
		return fmt.Errorf("find table: %w", err)
	}
	if !exists {
		return nil
	}
	for _, name := range triggerNames(hash) {
		if _, err := tx.Exec(ctx, `DROP TRIGGER IF EXISTS `+pgx.Identifier{name}.Sanitize()+` ON `+table.Sanitize()); err != nil {
			return fmt.Errorf("drop trigger %s: %w", name, err)
		}
	}
	return nil
}

// forget deletes a source's pending changes and failures.
func forget(ctx context.Context, tx pgx.Tx, name string) error {
	if _, err := tx.Exec(ctx, "DELETE FROM syncer_changes WHERE source = $1", name); err != nil {
		return fmt.Errorf("drop pending changes: %w", err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM syncer_source_failures WHERE source = $1", name); err != nil {
		return fmt.Errorf("drop failures: %w", err)
	}
	return nil
}

// remove uninstalls a source that is no longer configured.
func remove(ctx context.Context, db Beginner, schema, name string) error {
	hash := objectHash(schema, name)
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", InstallLockTimeout.Milliseconds())); err != nil {
			return err
		}
		var tschema, table string
		err := tx.QueryRow(ctx, "SELECT schema_name, table_name FROM syncer_sources WHERE name = $1 FOR UPDATE", name).Scan(&tschema, &table)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // removed by a concurrent migrate
		}
		if err != nil {
			return fmt.Errorf("read syncer_sources: %w", err)
		}
		if err := dropTriggers(ctx, tx, hash, pgx.Identifier{tschema, table}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DROP FUNCTION IF EXISTS "+pgx.Identifier{schema, functionName(hash)}.Sanitize()+"()"); err != nil {
			return fmt.Errorf("drop capture function: %w", err)
		}
		if err := forget(ctx, tx, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM syncer_sources WHERE name = $1", name); err != nil {
			return fmt.Errorf("delete from syncer_sources: %w", err)
		}
		return nil
	})
}

// captureBody is the capture function of a source: one change row per row
// written, one outbox event and notification per statement that wrote any
// while the gate is open; the event's op and the notification's payload
// are migrations.SourceOp(name), so a relay can tell which source has work. It names every
// object with its schema (the function pins its search_path), and the
// source's name comes as the trigger's argument. The key is logged in its
// text form, and as a bigint for integer keys (num) so that they are read
// in numeric order.
func captureBody(schema string, s *Source) string {
	changes := pgx.Identifier{schema, "syncer_changes"}.Sanitize()
	outbox := pgx.Identifier{schema, "syncer_outbox"}.Sanitize()
	key := pgx.Identifier{s.Key}.Sanitize()
	num := func(alias string) string {
		if s.Kind == KeyInteger {
			return alias + "." + key + "::bigint"
		}
		return "0"
	}
	op := "'" + migrations.SourceOpPrefix + "' || syncer_source" // a constant with no quote in it
	ins := "INSERT INTO " + changes + " (source, num, key, deleted)\n        "
	return `
-- ` + captureVersion + `: see internal/sources.
#variable_conflict use_variable
DECLARE
    syncer_source text := TG_ARGV[0];
    syncer_rows   bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ` + ins + `SELECT syncer_source, ` + num("n") + `, n.` + key + `::text, false FROM syncer_new n;
    ELSIF TG_OP = 'UPDATE' THEN
        -- A changed key is a new key and a deleted one.
        ` + ins + `SELECT syncer_source, ` + num("n") + `, n.` + key + `::text, false FROM syncer_new n
        UNION ALL
        SELECT syncer_source, ` + num("o") + `, o.` + key + `::text, true FROM syncer_old o
        WHERE NOT EXISTS (SELECT FROM syncer_new n WHERE n.` + key + ` = o.` + key + `);
    ELSIF TG_OP = 'DELETE' THEN
        ` + ins + `SELECT syncer_source, ` + num("o") + `, o.` + key + `::text, true FROM syncer_old o;
    ELSE
        -- TRUNCATE, before it: every row still there is deleted.
        ` + ins + `SELECT syncer_source, ` + num("o") + `, o.` + key + `::text, true FROM ` + s.table() + ` o;
    END IF;
    -- The outbox's gate (migrations.GateOpen).
    GET DIAGNOSTICS syncer_rows = ROW_COUNT;
    IF syncer_rows > 0 AND ` + migrations.GateOpen(schema) + ` THEN
        INSERT INTO ` + outbox + ` (op) VALUES (` + op + `);
        PERFORM pg_notify(` + quoteLiteral(migrations.Channel(schema)) + `, ` + op + `);
    END IF;
    RETURN NULL;
END
`
}

// dollarQuote quotes a function body with a tag that does not occur in
// it.
func dollarQuote(body string) string {
	tag := "$syncer$"
	for i := 0; strings.Contains(body, tag); i++ {
		tag = fmt.Sprintf("$syncer%d$", i)
	}
	return tag + body + tag
}

// quoteLiteral quotes a string as an SQL literal that reads the same
// whatever standard_conforming_strings says: an E-prefixed string with quotes
// and backslashes doubled. DDL takes no parameters.
func quoteLiteral(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `'`, `''`)
	return "E'" + s + "'"
}
