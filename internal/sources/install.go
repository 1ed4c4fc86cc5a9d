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
const captureVersion = "syncer capture v3"

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
//     when they differ from this version's or a partition lacks its
//     TRUNCATE trigger (made since: the snapshot restarts if one of those
//     holds a row), in a transaction of its own, and the source is
//     recorded in syncer_sources, its snapshot pending (or skipped with
//     snapshot: false); a source whose table or key changed starts afresh;
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
	s.partitioned = kind == "p"

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
			if err := dropTriggers(ctx, tx, schema, hash); err != nil {
				return err
			}
			if err := forget(ctx, tx, s.Name); err != nil {
				return err
			}
		}

		// Partitions attached or created since the triggers were made
		// have the row triggers (PostgreSQL clones them) but not the
		// TRUNCATE trigger, and an attached one brought rows no trigger
		// saw.
		fresh, err := uncaptured(ctx, tx, s.table(), triggerNames(hash)[3])
		if err != nil {
			return err
		}
		current, err := triggersCurrent(ctx, tx, schema, hash, s, body)
		if err != nil {
			return err
		}
		if !current || len(fresh) > 0 {
			if err := createTriggers(ctx, tx, schema, fn, hash, s, body); err != nil {
				return err
			}
		}
		resnapshot := false
		if exists && !moved && c.Snapshot && len(fresh) > 0 {
			// Their rows are sent by a snapshot of the whole table, in the
			// daemon's short chunks: logging them here would hold the lock
			// that creating the trigger took while the partitions are read.
			// An empty partition (made ahead for later rows) needs none.
			resnapshot, err = anyRows(ctx, tx, fresh)
			if err != nil {
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
		if exists && !moved && len(fresh) > 0 {
			ch.Action = Updated
			ch.Detail = joinDetail(ch.Detail, "TRUNCATE now captured on partitions "+strings.Join(fresh, ", "))
			if resnapshot {
				if _, err := Resnapshot(ctx, tx, s.Name); err != nil {
					return err
				}
				ch.Detail += ": snapshot restarted for their rows"
			}
		}
		return nil
	})
	return ch, err
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// uncaptured returns the partitions of a table (at any depth, qualified
// and quoted) that lack its source's TRUNCATE trigger: attached or created
// since migrate made the triggers. PostgreSQL clones a partitioned table's
// row triggers to every partition, later ones included, but not its
// statement triggers, and TRUNCATE has only those. Empty for a table that
// is not partitioned.
func uncaptured(ctx context.Context, q Querier, table, truncateTrigger string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname)
		FROM pg_catalog.pg_partition_tree(to_regclass($1)) p
		JOIN pg_catalog.pg_class c ON c.oid = p.relid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE p.level > 0 AND c.relkind IN ('r', 'p')
			AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger tg WHERE tg.tgrelid = p.relid AND tg.tgname = $2)
		ORDER BY p.level, c.relname`, table, truncateTrigger)
	if err != nil {
		return nil, fmt.Errorf("read partitions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read partitions: %w", err)
	}
	return out, nil
}

// UncapturedPartitions returns the partitions of src's table (qualified)
// on which a TRUNCATE is not captured: attached or created since `syncer
// migrate` installed the source. Their inserts, updates and deletes are
// captured (PostgreSQL clones the row triggers), but not a TRUNCATE of one
// of them alone, nor the rows an attached table brought with it. Running
// migrate again closes the gap (and restarts the snapshot for such rows);
// until then status and `config check` name them. Empty for a table that is
// not partitioned, or that is gone. Call it on a connection whose current
// schema is syncer's.
func UncapturedPartitions(ctx context.Context, q Querier, src *Source) ([]string, error) {
	var schema string
	if err := q.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, fmt.Errorf("sources: source %s: current schema: %w", src.Name, err)
	}
	out, err := uncaptured(ctx, q, src.table(), triggerNames(objectHash(schema, src.Name))[3])
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: %w", src.Name, err)
	}
	return out, nil
}

// anyRows reports whether one of the tables (qualified and quoted) holds a
// row.
func anyRows(ctx context.Context, q Querier, tables []string) (bool, error) {
	for _, t := range tables {
		var ok bool
		if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+t+")").Scan(&ok); err != nil {
			return false, fmt.Errorf("read partition %s: %w", t, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
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

// createTriggers creates or replaces the capture function and the
// triggers. Dropping and creating in one transaction is atomic for
// writers.
//
// A table gets four statement triggers, three of them with transition
// tables: one call a statement, however many rows it writes. A
// partitioned table gets row triggers instead: PostgreSQL runs a
// partitioned table's statement triggers only for statements that name
// it, so a write made to a partition directly went unseen, while its row
// triggers are cloned to every partition, those attached or created later
// included, and run however the row is reached. TRUNCATE has statement
// triggers only: one on the table and one on each partition there is now
// (see uncaptured for those made later).
func createTriggers(ctx context.Context, tx pgx.Tx, schema, fn, hash string, s *Source, body string) error {
	// SECURITY DEFINER: the application's roles need no privilege on
	// syncer's tables; search_path is pinned because the body names every
	// object with its schema.
	if _, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION `+fn+`() RETURNS trigger
		LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS `+dollarQuote(body)); err != nil {
		return fmt.Errorf("create capture function: %w", err)
	}
	tbl := s.table()
	if err := dropTriggers(ctx, tx, schema, hash); err != nil {
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
	if s.partitioned {
		defs[0] = `AFTER INSERT ON ` + tbl + ` FOR EACH ROW`
		defs[1] = `AFTER UPDATE ON ` + tbl + ` FOR EACH ROW`
		defs[2] = `AFTER DELETE ON ` + tbl + ` FOR EACH ROW`
	}
	for i, def := range defs {
		if _, err := tx.Exec(ctx, `CREATE TRIGGER `+pgx.Identifier{names[i]}.Sanitize()+` `+def+` EXECUTE FUNCTION `+fn+`(`+arg+`)`); err != nil {
			return fmt.Errorf("create trigger %s: %w", names[i], err)
		}
	}
	partitions, err := uncaptured(ctx, tx, tbl, names[3])
	if err != nil {
		return err
	}
	for _, p := range partitions {
		if _, err := tx.Exec(ctx, `CREATE TRIGGER `+pgx.Identifier{names[3]}.Sanitize()+` BEFORE TRUNCATE ON `+p+
			` FOR EACH STATEMENT EXECUTE FUNCTION `+fn+`(`+arg+`)`); err != nil {
			return fmt.Errorf("create trigger %s on partition %s: %w", names[3], p, err)
		}
	}
	return nil
}

// dropTriggers drops every trigger of a source, wherever it is: on its
// table, on its partitions, on a table that was its partition and was
// detached, or on the table it had before its configuration changed. A
// trigger PostgreSQL cloned to a partition goes with its parent's.
func dropTriggers(ctx context.Context, tx pgx.Tx, schema, hash string) error {
	rows, err := tx.Query(ctx, `SELECT n.nspname, c.relname, tg.tgname FROM pg_catalog.pg_trigger tg
		JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE tg.tgfoid = to_regprocedure($1) AND tg.tgparentid = 0 AND tg.tgname = ANY ($2)
		ORDER BY c.oid, tg.tgname`,
		pgx.Identifier{schema, functionName(hash)}.Sanitize()+"()", triggerNames(hash))
	if err != nil {
		return fmt.Errorf("find triggers: %w", err)
	}
	type trigger struct{ schema, table, name string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (trigger, error) {
		var tg trigger
		err := r.Scan(&tg.schema, &tg.table, &tg.name)
		return tg, err
	})
	if err != nil {
		return fmt.Errorf("find triggers: %w", err)
	}
	for _, tg := range found {
		if _, err := tx.Exec(ctx, `DROP TRIGGER IF EXISTS `+pgx.Identifier{tg.name}.Sanitize()+` ON `+pgx.Identifier{tg.schema, tg.table}.Sanitize()); err != nil {
			return fmt.Errorf("drop trigger %s: %w", tg.name, err)
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
		var one int
		err := tx.QueryRow(ctx, "SELECT 1 FROM syncer_sources WHERE name = $1 FOR UPDATE", name).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // removed by a concurrent migrate
		}
		if err != nil {
			return fmt.Errorf("read syncer_sources: %w", err)
		}
		if err := dropTriggers(ctx, tx, schema, hash); err != nil {
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
// written, one outbox event and notification per statement (a table) or
// per transaction (a partitioned table) that wrote any while the gate is
// open; the event's op and the notification's payload are
// migrations.SourceOp(name), so a relay can tell which source has work. It names
// every object with its schema (the function pins its search_path), and
// the source's name comes as the trigger's argument. The key is logged in
// its text form, and as a bigint for integer keys (num) so that they are
// read in numeric order. Columns of the application's table are only ever
// read qualified (n.col, OLD.col), and the function's variables win over
// them (use_variable), so no column name can change what it does.
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
	ins := "INSERT INTO " + changes + " (source, num, key, deleted)\n        "
	op := "'" + migrations.SourceOpPrefix + "' || syncer_source" // a constant with no quote in it
	signal := `INSERT INTO ` + outbox + ` (op) VALUES (` + op + `);
        PERFORM pg_notify(` + quoteLiteral(migrations.Channel(schema)) + `, ` + op + `);`
	// TRUNCATE runs the statement triggers of the table named and of
	// every partition it empties: each logs the rows of its table but
	// those of a partition that has the trigger too, which logs its own.
	// So a partition made after migrate (no trigger of its own) is logged
	// when its parent is truncated, and each row once.
	truncate := `EXECUTE ` + quoteLiteral("INSERT INTO "+changes+" (source, num, key, deleted) SELECT $1, "+num("o")+", o."+key+"::text, true FROM ") + `
            || TG_RELID::regclass::text || ' o WHERE o.tableoid <> ALL ($2)'
        USING syncer_source, ARRAY(SELECT tg.tgrelid FROM pg_catalog.pg_trigger tg WHERE tg.tgname = TG_NAME AND tg.tgrelid <> TG_RELID);`
	head := `
-- ` + captureVersion + `: see internal/sources.
#variable_conflict use_variable
DECLARE
    syncer_source text := TG_ARGV[0];
    syncer_rows   bigint;
BEGIN
`
	if s.partitioned {
		flag := quoteLiteral("syncer.signalled_" + objectHash(schema, s.Name))
		return head + `    IF TG_OP = 'TRUNCATE' THEN
        -- Before it: every row still there is deleted.
        ` + truncate + `
        GET DIAGNOSTICS syncer_rows = ROW_COUNT;
        IF syncer_rows > 0 AND ` + migrations.GateOpen(schema) + ` THEN
            ` + signal + `
        END IF;
        RETURN NULL;
    END IF;
    -- A row trigger, cloned to every partition: one change per row.
    IF TG_OP = 'INSERT' THEN
        ` + ins + `VALUES (syncer_source, ` + num("NEW") + `, NEW.` + key + `::text, false);
    ELSIF TG_OP = 'UPDATE' THEN
        ` + ins + `VALUES (syncer_source, ` + num("NEW") + `, NEW.` + key + `::text, false);
        -- A changed key is a new key and a deleted one. (A row moved to
        -- another partition comes as a DELETE and an INSERT.)
        IF NEW.` + key + ` IS DISTINCT FROM OLD.` + key + ` THEN
            ` + ins + `VALUES (syncer_source, ` + num("OLD") + `, OLD.` + key + `::text, true);
        END IF;
    ELSE
        ` + ins + `VALUES (syncer_source, ` + num("OLD") + `, OLD.` + key + `::text, true);
    END IF;
    -- One event a transaction, not one a row: the flag is local to the
    -- transaction (and undone with a rolled-back savepoint, as the event
    -- is). The gate is read until it is found open.
    IF current_setting(` + flag + `, true) IS DISTINCT FROM 'on' AND ` + migrations.GateOpen(schema) + ` THEN
        ` + signal + `
        PERFORM set_config(` + flag + `, 'on', true);
    END IF;
    RETURN NULL;
END
`
	}
	return head + `    IF TG_OP = 'INSERT' THEN
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
        ` + truncate + `
    END IF;
    -- The gate of 006_gate_lease.sql, read here rather than through a
    -- function: a call would cost the writer as much as the read.
    GET DIAGNOSTICS syncer_rows = ROW_COUNT;
    IF syncer_rows > 0 AND ` + migrations.GateOpen(schema) + ` THEN
        ` + signal + `
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
