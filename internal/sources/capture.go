package sources

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/migrations"
)

// captureVersion is written into every capture function, so that an
// installation made by an older syncer is recognised and replaced.
const captureVersion = "syncer capture v6"

// captureBody is the capture function of a source: one change row per row
// written, one outbox event and notification per transaction that wrote
// any while the gate is open; the event's op and the notification's payload are
// migrations.SourceOp(name), so a relay can tell which source has work. It names
// every object with its schema, pg_catalog's functions, operators and
// types too, but for the filter and the partitioned body's row comparison
// and settings, which the pinned search_path covers (pinsSearchPath); the
// source's name comes as the trigger's argument. The key is logged in
// its text form, and as a bigint for integer keys (num) so that they are
// read in numeric order. Columns of the application's table are only ever
// read qualified (n.col, OLD.col), and the function's variables win over
// them (use_variable), so no column name can change what it does.
func captureBody(schema string, s *Source) string {
	changes := pgx.Identifier{schema, "syncer_changes"}.Sanitize()
	outbox := pgx.Identifier{schema, "syncer_outbox"}.Sanitize()
	num := func(alias string) string { return s.numSQL(s.keyColumns(alias)) }
	text := func(alias string) string { return s.keyTextSQL(s.keyColumns(alias)) }
	row := func(alias string) string { return rowSQL(s.keyColumns(alias)) }
	ins := "INSERT INTO " + changes + " (source, num, key, deleted" + s.tenantColumns() + ")\n        "
	tv := s.tenantValues
	// The transaction-local setting that says the source's event and
	// notification of the transaction are made.
	flag := quoteLiteral("syncer.signalled_" + objectHash(schema, s.Name))
	op := "'" + migrations.SourceOpPrefix + "' OPERATOR(pg_catalog.||) syncer_source" // a constant with no quote in it
	signal := `INSERT INTO ` + outbox + ` (op) VALUES (` + op + `);
        PERFORM pg_catalog.pg_notify(` + quoteLiteral(migrations.Channel(schema)) + `, ` + op + `);`
	// TRUNCATE runs the statement triggers of the table named and of
	// every partition it empties: each logs the rows of its table but
	// those of a partition that has the trigger too, which logs its own.
	// So a partition made after migrate (no trigger of its own) is logged
	// when its parent is truncated, and each row once.
	tail := `' o WHERE o.tableoid OPERATOR(pg_catalog.<>) ALL ($2)'`
	if s.Where != "" {
		tail = quoteLiteral(" o WHERE o.tableoid OPERATOR(pg_catalog.<>) ALL ($2)" + s.filterAnd())
	}
	// Without a filter, each statement is the one it was before filters
	// were, so that an installation made then is current still.
	// With a filter, an UPDATE logs the rows that match after it and those
	// that matched before it and no longer do (their key reads as gone).
	guard := func(cond, stmt string) string {
		if s.Where == "" {
			return stmt
		}
		return "IF " + cond + " THEN\n            " + stmt + "\n        END IF;"
	}
	truncate := `EXECUTE ` + quoteLiteral("INSERT INTO "+changes+" (source, num, key, deleted"+s.tenantColumns()+") SELECT $1, "+num("o")+", "+text("o")+", true"+tv("o")+" FROM ") + `
            OPERATOR(pg_catalog.||) pg_catalog.format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME) OPERATOR(pg_catalog.||) ` + tail + `
        USING syncer_source, ARRAY(SELECT tg.tgrelid FROM pg_catalog.pg_trigger tg
            WHERE tg.tgname OPERATOR(pg_catalog.=) TG_NAME AND tg.tgrelid OPERATOR(pg_catalog.<>) TG_RELID);`
	head := `
-- ` + captureVersion + `: see internal/sources.
#variable_conflict use_variable
DECLARE
    syncer_source pg_catalog.text := TG_ARGV[0];
    syncer_rows   bigint;
BEGIN
`
	// unchanged compares what the source exports of two rows by their
	// binary images (record_image_eq, what REFRESH MATERIALIZED VIEW
	// CONCURRENTLY compares with): every type has one, json and point
	// too, which have no equality; NULL equals NULL; and equal images
	// read as equal payloads, while 1.0 and 1.00 differ, as their JSON
	// does.
	unchanged := func(a, b string) string {
		return "pg_catalog.record_image_eq(" + s.exportedSQL(a) + ", " + s.exportedSQL(b) + ")"
	}
	if s.partitioned {
		oldGone := row("NEW") + ` IS DISTINCT FROM ` + row("OLD")
		// The same row, exported the same and matching as it did.
		same := row("NEW") + ` IS NOT DISTINCT FROM ` + row("OLD") + ` AND ` + unchanged("NEW", "OLD")
		if s.Tenant != "" {
			// Moved to another tenant: the old tenant's key is gone.
			t := pgx.Identifier{s.Tenant}.Sanitize()
			oldGone = "(" + oldGone + " OR ROW(NEW." + t + ") IS DISTINCT FROM ROW(OLD." + t + "))"
			same += " AND ROW(NEW." + t + ") IS NOT DISTINCT FROM ROW(OLD." + t + ")"
		}
		if s.Where != "" {
			same += " AND " + s.filterOfRecord("OLD")
		}
		if s.Where != "" {
			// Or the row no longer matches: its key reads as gone.
			oldGone = s.filterOfRecord("OLD") + " AND (" + oldGone + " OR NOT " + s.filterOfRecord("NEW") + ")"
		}
		return head + `    IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' THEN
        -- Before it: every row still there is deleted.
        ` + truncate + `
        GET DIAGNOSTICS syncer_rows = ROW_COUNT;
        IF syncer_rows OPERATOR(pg_catalog.>) 0 AND ` + migrations.GateOpen(schema) + ` THEN
            ` + signal + `
        END IF;
        RETURN NULL;
    END IF;
    -- A row trigger, cloned to every partition: one change per row.
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        ` + guard(s.filterOfRecord("NEW"), ins+`VALUES (syncer_source, `+num("NEW")+`, `+text("NEW")+`, false`+tv("NEW")+`);`) + `
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        -- A row whose key, exported values and match are what they were
        -- is no change.
        IF NOT (` + same + `) THEN
            ` + guard(s.filterOfRecord("NEW"), ins+`VALUES (syncer_source, `+num("NEW")+`, `+text("NEW")+`, false`+tv("NEW")+`);`) + `
        END IF;
        -- A changed key is a new key and a deleted one. (A row moved to
        -- another partition comes as a DELETE and an INSERT.)
        IF ` + oldGone + ` THEN
            ` + ins + `VALUES (syncer_source, ` + num("OLD") + `, ` + text("OLD") + `, true` + tv("OLD") + `);
        END IF;
    ELSE
        ` + guard(s.filterOfRecord("OLD"), ins+`VALUES (syncer_source, `+num("OLD")+`, `+text("OLD")+`, true`+tv("OLD")+`);`) + `
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
	return head + `    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        ` + ins + `SELECT syncer_source, ` + num("n") + `, ` + text("n") + `, false` + tv("n") + ` FROM syncer_new n` + s.filterWhere() + `;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        -- A changed key is a new key and a deleted one. A row whose key,
        -- exported values and match are what they were is no change.
        ` + ins + `SELECT syncer_source, ` + num("n") + `, ` + text("n") + `, false` + tv("n") + ` FROM syncer_new n
        WHERE ` + s.filterCond() + `NOT EXISTS (SELECT FROM syncer_old o WHERE ` + row("o") + ` OPERATOR(pg_catalog.=) ` + row("n") + `
            AND ` + unchanged("n", "o") + s.sameTenant("n", "o") + s.filterAnd() + `)
        UNION ALL
        SELECT syncer_source, ` + num("o") + `, ` + text("o") + `, true` + tv("o") + ` FROM syncer_old o
        WHERE NOT EXISTS (SELECT FROM syncer_new n WHERE ` + row("n") + ` OPERATOR(pg_catalog.=) ` + row("o") + s.sameTenant("n", "o") + s.filterAnd() + `)` + s.filterAnd() + `;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        ` + ins + `SELECT syncer_source, ` + num("o") + `, ` + text("o") + `, true` + tv("o") + ` FROM syncer_old o` + s.filterWhere() + `;
    ELSE
        -- TRUNCATE, before it: every row still there is deleted.
        ` + truncate + `
    END IF;
    -- The gate of 006_gate_lease.sql, read here rather than through a
    -- function: a call would cost the writer as much as the read. One
    -- event and notification a transaction, not one a statement: the
    -- flag is local to the transaction and undone with a rolled-back
    -- savepoint, as the event is. It is read after the gate, so that
    -- a statement under a shut gate (the daemon busy) pays what it did.
    GET DIAGNOSTICS syncer_rows = ROW_COUNT;
    IF syncer_rows OPERATOR(pg_catalog.>) 0 AND ` + migrations.GateOpen(schema) + `
            AND NOT COALESCE(pg_catalog.current_setting(` + flag + `, true) OPERATOR(pg_catalog.=) 'on', false) THEN
        ` + signal + `
        PERFORM pg_catalog.set_config(` + flag + `, 'on', true);
    END IF;
    RETURN NULL;
END
`
}

// exportedSQL is what the source exports of the row alias names, as a
// record: the configured columns in a row, or the whole row (alias.* for a
// transition table's row, the record itself for PL/pgSQL's NEW and OLD).
func (s *Source) exportedSQL(alias string) string {
	if s.Columns == nil {
		if alias == "NEW" || alias == "OLD" {
			return alias
		}
		return alias + ".*"
	}
	cols := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		cols[i] = alias + "." + pgx.Identifier{c}.Sanitize()
	}
	return "ROW(" + strings.Join(cols, ", ") + ")"
}

// pinsSearchPath reports whether the source's capture function pins its
// search_path (SET search_path = pg_catalog, pg_temp). It runs as syncer's
// owner, so nothing the writer's search_path finds may stand in for what
// its body names. A body whose every name is explicit (tables with their
// schema, pg_catalog's functions, operators and types by name, the
// transition tables, which PostgreSQL resolves before any schema) is safe
// under any path and needs no pin, which costs each call a save, set and
// restore of the setting and the re-check of cached plans that follows
// (docs/design.md, "What the triggers cost the writers"). Two bodies
// cannot be written so: a row filter is the configuration's SQL, its
// names unqualified, and must mean what it meant when migrate compiled it;
// the partitioned body compares rows with IS DISTINCT FROM, which has no
// qualified form.
func (s *Source) pinsSearchPath() bool {
	return s.Where != "" || s.partitioned
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
