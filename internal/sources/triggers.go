package sources

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// uncaptured returns the partitions of a table (at any depth, qualified
// and quoted) that lack its source's TRUNCATE trigger: attached or created
// since migrate made the triggers. PostgreSQL clones a partitioned table's
// row triggers to every partition, later ones included, but not its
// statement triggers, and TRUNCATE has only those. Empty for a table that
// is not partitioned.
func uncaptured(ctx context.Context, q database.Querier, table, truncateTrigger string) ([]string, error) {
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
func UncapturedPartitions(ctx context.Context, q database.Querier, src *Source) ([]string, error) {
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
func anyRows(ctx context.Context, q database.Querier, tables []string) (bool, error) {
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
func triggersCurrent(ctx context.Context, q database.Querier, schema, hash string, s *Source, body string) (bool, error) {
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
	// syncer's tables. The search_path is pinned only where the body
	// cannot name everything explicitly (pinsSearchPath); CREATE OR
	// REPLACE without SET drops the pin an earlier version set.
	pin := ""
	if s.pinsSearchPath() {
		pin = " SET search_path = pg_catalog, pg_temp"
	}
	if _, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION `+fn+`() RETURNS trigger
		LANGUAGE plpgsql SECURITY DEFINER`+pin+` AS `+dollarQuote(body)); err != nil {
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
