package dbtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// HostileWriter is a role that may write some tables and nothing of
// syncer's, and a schema of its objects named as pg_catalog's are: now(),
// pg_notify, format, to_jsonb, the operators syncer's triggers use and a
// type text. On a search_path that puts Schema before pg_catalog (Run's) they win
// over pg_catalog's wherever a name is written unqualified. Run as the
// writer they do what pg_catalog's do; run as anyone else (inside a
// SECURITY DEFINER function of syncer's owner) they raise "hijacked as
// <role>", which is what a writer's function running with syncer's
// privileges would be.
type HostileWriter struct {
	Role   string // quoted
	Schema string // quoted
}

// hostileObjects are the writer's objects; {schema} is its schema, {role}
// its role as a literal.
const hostileObjects = `
CREATE FUNCTION {schema}.hijacked() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_user OPERATOR(pg_catalog.<>) {role} THEN
        RAISE EXCEPTION 'hijacked as %', current_user;
    END IF;
    RETURN true;
END $$;
CREATE FUNCTION {schema}.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT CASE WHEN {schema}.hijacked() THEN pg_catalog.now() END';
CREATE FUNCTION {schema}.pg_notify(text, text) RETURNS void LANGUAGE sql AS 'SELECT CASE WHEN {schema}.hijacked() THEN pg_catalog.pg_notify($1, $2) END';
CREATE FUNCTION {schema}.format(text, text, text) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN {schema}.hijacked() THEN pg_catalog.format($1, $2, $3) END';
CREATE FUNCTION {schema}.to_jsonb(anyelement) RETURNS jsonb LANGUAGE sql AS 'SELECT CASE WHEN {schema}.hijacked() THEN pg_catalog.to_jsonb($1) END';
CREATE DOMAIN {schema}.text AS pg_catalog.text CHECK ({schema}.hijacked());
`

// hostileOperators are the operators shadowed: name, left and right
// types, result type.
var hostileOperators = [][4]string{
	{">", "timestamptz", "timestamptz", "boolean"},
	{">", "bigint", "integer", "boolean"},
	{"=", "bigint", "bigint", "boolean"},
	{"=", "integer", "integer", "boolean"},
	{"=", "text", "text", "boolean"},
	{"=", "name", "name", "boolean"},
	{"<>", "text", "text", "boolean"},
	{"<>", "oid", "oid", "boolean"},
	{"||", "text", "text", "text"},
	{"+", "bigint", "integer", "bigint"},
	{"+", "bigint", "bigint", "bigint"},
}

// NewHostileWriter creates a hostile writer with SELECT, INSERT, UPDATE,
// DELETE and TRUNCATE on tables (qualified and quoted) and the use of the
// sequences of their schemas; both go when the test ends. pool's user
// must be allowed to create roles.
func NewHostileWriter(tb testing.TB, pool *pgxpool.Pool, name string, tables ...string) HostileWriter {
	tb.Helper()
	ctx := context.Background()
	h := HostileWriter{Role: pgx.Identifier{name + "_hostile"}.Sanitize(), Schema: pgx.Identifier{name + "_hostile"}.Sanitize()}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+h.Schema+` CASCADE`)
		_, _ = pool.Exec(ctx, `DROP OWNED BY `+h.Role)
		_, _ = pool.Exec(ctx, `DROP ROLE IF EXISTS `+h.Role)
	})
	lit := "'" + strings.ReplaceAll(name+"_hostile", "'", "''") + "'"
	sql := []string{`CREATE ROLE ` + h.Role, `CREATE SCHEMA ` + h.Schema,
		`GRANT USAGE ON SCHEMA ` + h.Schema + ` TO ` + h.Role,
		strings.NewReplacer("{schema}", h.Schema, "{role}", lit).Replace(hostileObjects)}
	for i, op := range hostileOperators {
		fn := h.Schema + ".op" + string(rune('a'+i))
		sql = append(sql,
			`CREATE FUNCTION `+fn+`(`+op[1]+`, `+op[2]+`) RETURNS `+op[3]+` LANGUAGE sql AS 'SELECT CASE WHEN `+h.Schema+`.hijacked() THEN $1 OPERATOR(pg_catalog.`+op[0]+`) $2 END'`,
			`CREATE OPERATOR `+h.Schema+`.`+op[0]+` (FUNCTION = `+fn+`, LEFTARG = `+op[1]+`, RIGHTARG = `+op[2]+`)`)
	}
	for _, t := range tables {
		sql = append(sql, `GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON `+t+` TO `+h.Role)
		schema, _, _ := strings.Cut(t, ".")
		sql = append(sql, `GRANT USAGE ON SCHEMA `+schema+` TO `+h.Role,
			`GRANT USAGE ON ALL SEQUENCES IN SCHEMA `+schema+` TO `+h.Role)
	}
	for _, s := range sql {
		if _, err := pool.Exec(ctx, s); err != nil {
			tb.Fatalf("dbtest: hostile writer: %s: %v", s, err)
		}
	}
	return h
}

// Run runs sql in a transaction of its own as the writer, on its
// search_path: its schema, pg_catalog, then the session's path.
func (h HostileWriter) Run(ctx context.Context, pool *pgxpool.Pool, sql string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1 || ', pg_catalog, ' || current_setting('search_path'), true)`, h.Schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+h.Role); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql)
		return err
	})
}
