package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// InstallLockTimeout bounds how long Install waits for the lock that
// creating a trigger takes on an application's table (it waits for the
// table's open write transactions, and writers queue behind it): past it,
// migrate fails rather than stall the application's writers.
const InstallLockTimeout = 10 * time.Second

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

// ErrNoPrimaryKey is wrapped by the error of a source whose table has no
// primary key: a setting of the user's, so the command line exits 2 on it
// (docs/protocol.md, Table shapes), config check excepted.
var ErrNoPrimaryKey = errors.New("has no primary key")

// IsUsage reports whether the error is the user's setting that no retry
// can mend: a table without a primary key.
func (e *SourceError) IsUsage() bool { return errors.Is(e.Err, ErrNoPrimaryKey) }

// Install makes the database export what specs configure, and nothing else.
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
func Install(ctx context.Context, db database.DB, specs []Spec) (*InstallResult, error) {
	res := &InstallResult{}
	var resolved []*Source
	var installed []string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&res.Schema); err != nil {
			return fmt.Errorf("sources: current schema: %w", err)
		}
		var problems []error
		for i := range specs {
			s, err := inspect(ctx, tx, &specs[i])
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
		ch, err := installOne(ctx, db, res.Schema, s, &specs[i])
		if err != nil {
			return res, &SourceError{Source: s.Name, Err: err}
		}
		res.Changes = append(res.Changes, ch)
	}
	for _, name := range installed {
		if specNamed(specs, name) != nil {
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

// installed is a source's row in syncer_sources.
type installedRow struct {
	schema, table, key string
	kind               KeyKind
	keyType            string
	columns            []string
	destination        string
	where              string
	tenant             string
	lanes              int
}

// installOne installs one source in a transaction of its own, so that the
// lock its triggers take on the table is held for as short a time as
// possible.
func installOne(ctx context.Context, db database.DB, schema string, s *Source, c *Spec) (Change, error) {
	ch := Change{Source: s.Name, Action: Unchanged}
	hash := objectHash(schema, s.Name)
	fn := pgx.Identifier{schema, functionName(hash)}.Sanitize()
	body := captureBody(schema, s)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", InstallLockTimeout.Milliseconds())); err != nil {
			return err
		}
		var prev installedRow
		err := tx.QueryRow(ctx, `SELECT schema_name, table_name, key_column, key_kind, key_type, columns, destination,
				COALESCE(row_filter, ''), COALESCE(tenant_column, ''), lanes
			FROM syncer_sources WHERE name = $1 FOR UPDATE`, s.Name).
			Scan(&prev.schema, &prev.table, &prev.key, &prev.kind, &prev.keyType, &prev.columns, &prev.destination, &prev.where, &prev.tenant, &prev.lanes)
		exists := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read syncer_sources: %w", err)
		}
		// Another table or key: what is pending names keys of the old one.
		// Another tenant column: what is pending was logged for the old
		// one's tenants (or none), so it goes the same way.
		moved := exists && (prev.schema != s.Schema || prev.table != s.Table || prev.key != s.Key || prev.kind != s.Kind ||
			prev.tenant != s.Tenant)
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
			_, err = tx.Exec(ctx, `INSERT INTO syncer_sources (name, schema_name, table_name, key_column, key_kind, key_type, columns, destination, snapshot_state,
					key_columns, key_kinds, row_filter)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULLIF($12, ''))`,
				s.Name, s.Schema, s.Table, s.Key, s.Kind, s.KeyType, s.Columns, s.Destination, state, s.keysRecorded(), s.kindsRecorded(), s.Where)
		case moved:
			ch.Action, ch.Detail = Updated, "table, key or tenant changed: pending work dropped, snapshot restarted"
			_, err = tx.Exec(ctx, `UPDATE syncer_sources SET schema_name = $2, table_name = $3, key_column = $4, key_kind = $5,
					key_type = $6, columns = $7, destination = $8, snapshot_state = $9, snapshot_after = NULL,
					snapshot_rows = 0, snapshot_total = 0, snapshot_started_at = NULL, snapshot_done_at = NULL,
					installed_at = now(), updated_at = now(), key_columns = $10, key_kinds = $11, row_filter = NULLIF($12, '')
				WHERE name = $1`,
				s.Name, s.Schema, s.Table, s.Key, s.Kind, s.KeyType, s.Columns, s.Destination, state, s.keysRecorded(), s.kindsRecorded(), s.Where)
		case prev.keyType != s.KeyType || !slices.Equal(prev.columns, s.Columns) || prev.destination != s.Destination || prev.where != s.Where:
			ch.Action, ch.Detail = Updated, "columns, destination or where changed"
			if prev.where != s.Where {
				// Rows already at the third party are not revisited: a
				// replay of the source brings it to the new filter's rows.
				ch.Detail = "where changed: from now on; replay the source to bring the third party to it"
			}
			_, err = tx.Exec(ctx, `UPDATE syncer_sources SET key_type = $2, columns = $3, destination = $4, row_filter = NULLIF($5, ''),
					updated_at = now()
				WHERE name = $1`, s.Name, s.KeyType, s.Columns, s.Destination, s.Where)
		case !current:
			ch.Action, ch.Detail = Updated, "triggers replaced"
		}
		if err != nil {
			return fmt.Errorf("record in syncer_sources: %w", err)
		}
		if err := setLanes(ctx, tx, s, exists && !moved && prev.lanes != s.Lanes); err != nil {
			return err
		}
		if exists && !moved && s.Tenant != "" && prev.lanes != s.Lanes {
			ch.Action = Updated
			ch.Detail = joinDetail(ch.Detail, fmt.Sprintf("lanes changed from %d to %d: pending changes moved to their new lanes", prev.lanes, s.Lanes))
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

// forget deletes a source's pending changes and failures, and the digests
// of the bodies the third party accepted (its keys may now be other rows).
func forget(ctx context.Context, tx pgx.Tx, name string) error {
	if err := unchanged.Forget(ctx, tx, name); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "DELETE FROM syncer_changes WHERE source = $1", name); err != nil {
		return fmt.Errorf("drop pending changes: %w", err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM syncer_source_failures WHERE source = $1", name); err != nil {
		return fmt.Errorf("drop failures: %w", err)
	}
	return nil
}

// remove uninstalls a source that is no longer configured.
func remove(ctx context.Context, db database.DB, schema, name string) error {
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
