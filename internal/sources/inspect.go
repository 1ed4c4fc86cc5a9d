package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// inspect resolves a configured source against the catalog and checks
// that it can be installed. Problems of the table are *SourceError.
func inspect(ctx context.Context, q database.Querier, c *Spec) (*Source, error) {
	bad := func(format string, args ...any) error {
		return &SourceError{Source: c.Name, Err: fmt.Errorf(format, args...)}
	}
	ident := pgx.Identifier{c.Table}
	if c.Schema != "" {
		ident = pgx.Identifier{c.Schema, c.Table}
	}
	s := &Source{Name: c.Name, Key: c.Key, Columns: c.Columns, Destination: c.Destination, Where: c.Where,
		Tenant: c.Tenant, Lanes: c.Lanes}
	if s.Tenant == "" {
		s.Lanes = 0
	} else if s.Lanes == 0 {
		s.Lanes = LanesDefault
	}
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
	names := make([]string, len(pk))
	for i, p := range pk {
		names[i] = p.name
	}
	sorted := slices.Sorted(slices.Values(c.Keys))
	switch {
	case len(pk) == 0:
		return nil, bad("table %s %w: a source needs one (key: %s)", s.QualifiedTable(), ErrNoPrimaryKey, c.Key)
	case !slices.Equal(slices.Sorted(slices.Values(names)), sorted):
		return nil, bad("key: %s is not the primary key of %s (its primary key is %s)", strings.Join(c.Keys, ", "), s.QualifiedTable(), strings.Join(names, ", "))
	}
	byName := map[string]pkCol{}
	for _, p := range pk {
		byName[p.name] = p
	}
	var types []string
	for _, k := range c.Keys {
		p := byName[k]
		base, err := baseType(ctx, q, p.typ)
		if err != nil {
			return nil, fmt.Errorf("sources: source %s: key type: %w", c.Name, err)
		}
		var kind KeyKind
		switch base {
		case 20, 21, 23: // int8, int2, int4
			kind = KeyInteger
		case 25, 1043: // text, varchar
			kind = KeyText
		case 2950:
			kind = KeyUUID
		default:
			return nil, bad("key: %s is of type %s: a key's columns must be integers (smallint, integer, bigint), text, varchar or uuid", k, p.typName)
		}
		s.Keys, s.Kinds, types = append(s.Keys, k), append(s.Kinds, kind), append(types, p.typName)
	}
	s.Kind, s.KeyType = s.Kinds[0], types[0]
	if s.composite() {
		s.Kind, s.KeyType = KeyComposite, strings.Join(types, ", ")
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
	if s.Tenant != "" {
		// The tenant says where a row goes: a row without one could go
		// nowhere, so the column must refuse NULL.
		var notNull *bool
		err := q.QueryRow(ctx, `SELECT a.attnotnull FROM pg_attribute a
			WHERE a.attrelid = $1 AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, oid, s.Tenant).Scan(&notNull)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, bad("tenant: %s has no column %s", s.QualifiedTable(), s.Tenant)
		case err != nil:
			return nil, fmt.Errorf("sources: source %s: tenant column: %w", c.Name, err)
		case !*notNull:
			return nil, bad("tenant: column %s of %s must be NOT NULL: a row without a tenant could go to no account", s.Tenant, s.QualifiedTable())
		}
	}
	if err := checkFilter(ctx, q, s); err != nil {
		return nil, err
	}
	return s, nil
}

// baseType follows domains down to their base type.
func baseType(ctx context.Context, q database.Querier, typ uint32) (uint32, error) {
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
