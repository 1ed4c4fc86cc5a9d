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

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

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
	// Key names its primary key: the column, or for a key of several
	// columns the compact JSON array of their names (config.Source.Key).
	Key string
	// Kind is the key's kind: KeyComposite for a key of several columns.
	Kind KeyKind
	// Keys and Kinds are the key's columns and their kinds, in the
	// configuration's order: one of each for a key of one column.
	Keys  []string
	Kinds []KeyKind
	// KeyType is the key's SQL type, as PostgreSQL prints it (the types,
	// comma-separated, of a composite key).
	KeyType string
	// Columns are the payload's columns; nil means the whole row.
	Columns []string
	// Destination names the destination, as the file did at install time.
	Destination string
	// Where is the row filter the triggers evaluate (config.Source.Where);
	// empty exports every row.
	Where string
	// Tenant is the column that says whose a row is (Spec.Tenant); empty
	// for a source without tenants.
	Tenant string
	// Lanes is how many lanes the source is exported in (Spec.Lanes): 0
	// without a tenant column.
	Lanes int

	// partitioned is set by Install for a partitioned table, whose writes
	// are captured by row triggers (see captureBody).
	partitioned bool
	// collation is the key's collation, quoted, for text keys: comparing
	// with it lets the key's own index find the row.
	collation string
	sql       statements
}

type statements struct {
	pendingFirst, pendingAfter string
	tenantFirst, tenantAfter   string
	tenantsPages               string
	// keptFirst and keptAfter are the pending reads with each key's
	// kept digest (PendingKept).
	keptFirst, keptAfter         string
	snapshotFirst, snapshotAfter string
}

// QualifiedTable is schema.table, for messages.
func (s *Source) QualifiedTable() string { return s.Schema + "." + s.Table }

func (s *Source) table() string { return pgx.Identifier{s.Schema, s.Table}.Sanitize() }

// ErrNotInstalled is wrapped by Resolve's error for a configured source
// that `syncer migrate --config` has not installed as configured.
var ErrNotInstalled = errors.New("not installed as configured: run syncer migrate with this configuration")

// Load returns every installed source, by name.
func Load(ctx context.Context, q database.Querier) ([]*Source, error) {
	rows, err := q.Query(ctx, `SELECT name, schema_name, table_name, key_column, key_kind, key_type, columns, destination,
			key_columns, key_kinds, COALESCE(row_filter, ''), COALESCE(tenant_column, ''), lanes
		FROM syncer_sources ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sources: load: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Source, error) {
		s := &Source{}
		err := r.Scan(&s.Name, &s.Schema, &s.Table, &s.Key, &s.Kind, &s.KeyType, &s.Columns, &s.Destination, &s.Keys, &s.Kinds, &s.Where, &s.Tenant, &s.Lanes)
		if s.Tenant == "" {
			s.Lanes = 0
		}
		if s.Keys == nil {
			s.Keys, s.Kinds = []string{s.Key}, []KeyKind{s.Kind}
		}
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

// Resolve returns the installed sources that specs configure, in their
// order. A configured source that is not installed, or was installed with
// another table, key, columns or destination, is an error wrapping
// ErrNotInstalled that names it: the daemon must not export what migrate
// has not set up.
func Resolve(ctx context.Context, q database.Querier, specs []Spec) ([]*Source, error) {
	all, err := Load(ctx, q)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Source{}
	for _, s := range all {
		byName[s.Name] = s
	}
	out := make([]*Source, 0, len(specs))
	for i := range specs {
		c := &specs[i]
		s := byName[c.Name]
		var differs string
		switch {
		case s == nil:
			// Say why migrate could not install it, when its table says
			// (no primary key, a missing column...).
			var se *SourceError
			if _, err := inspect(ctx, q, c); errors.As(err, &se) {
				return nil, fmt.Errorf("sources: %w", err)
			}
			return nil, fmt.Errorf("sources: source %s: %w", c.Name, ErrNotInstalled)
		case s.Table != c.Table || (c.Schema != "" && s.Schema != c.Schema):
			differs = "table"
		case s.Key != c.Key:
			differs = "key"
		case !slices.Equal(s.Columns, c.Columns):
			differs = "columns"
		case s.Destination != c.Destination:
			differs = "destination"
		case s.Where != c.Where:
			differs = "where"
		case s.Tenant != c.Tenant:
			differs = "tenant"
		case s.Tenant != "" && s.Lanes != c.Lanes:
			differs = "lanes"
		}
		if differs != "" {
			return nil, fmt.Errorf("sources: source %s: its %s changed, so it is %w", c.Name, differs, ErrNotInstalled)
		}
		out = append(out, s)
	}
	return out, nil
}

// prepare looks up what the statements need and builds them once.
func (s *Source) prepare(ctx context.Context, q database.Querier) error {
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
		pendingFirst:  s.pendingSQL(false, false, false),
		pendingAfter:  s.pendingSQL(true, false, false),
		tenantFirst:   s.pendingSQL(false, true, true),
		tenantAfter:   s.pendingSQL(true, true, true),
		tenantsPages:  s.tenantsPagesSQL(),
		keptFirst:     s.pendingSQL(false, false, true),
		keptAfter:     s.pendingSQL(true, false, true),
		snapshotFirst: s.snapshotSQL(false),
		snapshotAfter: s.snapshotSQL(true),
	}
}

// pendingSQL reads a batch: $1 the source, $2 the limit, $3 the largest
// payload (its stored size: larger payloads are measured, not returned),
// after the cursor ($4 num, $5 key), then the payload's field names as one
// text[].
//
// With tenant, it reads one tenant's items of one lane: $4 the lane, $5 the
// tenant, then the cursor ($6, $7) and the names; a row of another tenant
// now is read as gone.
//
// With kept, each key comes with the digest internal/unchanged keeps for
// it under the source's name.
func (s *Source) pendingSQL(after, tenant, kept bool) string {
	if tenant && s.Tenant == "" {
		return ""
	}
	cond, names := "", "$4"
	if after {
		cond, names = " AND (c.num, c.key) > ($4::bigint, $5::text)", "$6"
	}
	rowCond := s.filterAnd()
	if tenant {
		cond, names = " AND c.lane = $4 AND c.tenant = $5", "$6"
		if after {
			cond, names = cond+" AND (c.num, c.key) > ($6::bigint, $7::text)", "$8"
		}
		rowCond = " AND " + s.tenantText("t") + " = $5::text" + rowCond
	}

	payload := s.payloadSQL(names)
	digest := ""
	if kept {
		tenantSQL := "''"
		if tenant {
			tenantSQL = "$5::text"
		}
		digest = ", " + unchanged.KeptSQL("$1::text", tenantSQL, "k.key")
	}

	match, keyJSON := s.keyMatch()

	// The row is looked up per key, by its primary key (LIMIT 1 keeps the
	// planner from turning the lookups into a scan of the whole table, which
	// its estimates can prefer for a table of some 100,000 rows). No row:
	// the key was deleted. Whether it exists is a constant of the lookup,
	// never the payload's nullness: a row that exists is never a tombstone,
	// whatever its columns hold.
	return `SELECT k.key, k.version, r.found IS NULL,
			CASE WHEN pg_column_size(r.payload) <= $3 THEN r.payload END, coalesce(pg_column_size(r.payload), 0), k.captured` + digest + `
		FROM (SELECT c.num, c.key` + keyJSON + `, max(c.seq) AS version, max(c.changed_at) AS captured FROM syncer_changes c
			WHERE c.source = $1` + cond + `
			GROUP BY c.num, c.key ORDER BY c.num, c.key LIMIT $2) k
		LEFT JOIN LATERAL (SELECT true AS found, ` + payload + ` AS payload FROM ` + s.table() + ` t WHERE ` + match + rowCond + ` LIMIT 1) r ON true
		ORDER BY k.num, k.key`
}

// keyMatch is the condition that the table's row aliased t is the key of
// the change aliased k (k.num, k.key, and k.key_json for a composite key,
// which keyJSON selects from the change log aliased c): the key's text form,
// read back as the key's type so that the table's primary key index finds
// the row.
func (s *Source) keyMatch() (match, keyJSON string) {
	key := "t." + pgx.Identifier{s.Key}.Sanitize()
	switch s.Kind {
	case KeyInteger:
		match = key + " = k.num"
	case KeyUUID:
		match = key + " = k.key::uuid"
	case KeyComposite:
		// Each key's text is parsed once, in k, not once a column.
		match = s.keyMatchSQL(s.keyValuesOfJSONSQL("k.key_json"))
		keyJSON = ", c.key::jsonb AS key_json"
	default:
		match = key + " = k.key::text COLLATE " + s.collation
	}
	return match, keyJSON
}

// payloadSQL is the payload of the table's row aliased t: the whole row,
// or the configured columns under their names, which the parameter names
// (a text[]) holds. t.* and not t: a bare name is a column first and the
// row only when no column has that name, so on a table with a column t,
// to_jsonb(t) was that column (and NULL where it was NULL). Every other
// reference to the table is qualified by its alias, which PostgreSQL
// resolves as a relation before a column.
func (s *Source) payloadSQL(names string) string {
	if s.Columns == nil {
		return "to_jsonb(t.*)"
	}
	var groups []string
	for start := 0; start < len(s.Columns); start += maxBuildArgs {
		var args []string
		for i := start; i < min(start+maxBuildArgs, len(s.Columns)); i++ {
			args = append(args, "("+names+"::text[])["+strconv.Itoa(i+1)+"], t."+pgx.Identifier{s.Columns[i]}.Sanitize())
		}
		groups = append(groups, "jsonb_build_object("+strings.Join(args, ", ")+")")
	}
	return strings.Join(groups, " || ")
}

// snapshotSQL logs a chunk of existing rows in the key's own order, from
// the table's primary key, under a share lock: a writer of one of these
// rows waits for the chunk's commit, so its change comes after the
// snapshot's, and the snapshot waits for a writer that came first. $1 the
// source, $2 the chunk, $3 the cursor. It returns the rows logged and the
// last key.
func (s *Source) snapshotSQL(after bool) string {
	cond := ""
	if after {
		cond = " WHERE " + rowSQL(s.keyColumns("t")) + " > " + rowSQL(s.keyValuesSQL("$3::text"))
	}
	return s.logKeysSQL(cond)
}

// logKeysSQL logs a chunk of the table's rows that cond (a WHERE clause on
// the table aliased t, or empty) selects, in the key's order, from the
// table's primary key, under a share lock. $1 is the source, $2 the chunk.
// It returns the rows logged, the last key's text form and the highest seq
// logged.
func (s *Source) logKeysSQL(cond string) string {
	cols := s.keyColumns("t")
	sel, rcols, desc := make([]string, len(cols)), make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		r := "r.k" + strconv.Itoa(i)
		sel[i], rcols[i], desc[i] = c+" AS k"+strconv.Itoa(i), r, r+" DESC"
	}
	text := s.keyTextSQL(rcols)
	tenantSel, tenantVals := "", ""
	if s.Tenant != "" {
		tenantSel = ", " + s.tenantText("t") + " AS syncer_tenant"
		tenantVals = ", r.syncer_tenant, " + laneSQL("r.syncer_tenant", strconv.Itoa(s.Lanes))
	}
	switch {
	case s.Where != "" && cond == "":
		cond = " WHERE (" + s.Where + ")"
	case s.Where != "":
		cond += s.filterAnd()
	}
	return `WITH r AS (SELECT ` + strings.Join(sel, ", ") + tenantSel + ` FROM ` + s.table() + ` t` + cond + `
			ORDER BY ` + strings.Join(cols, ", ") + ` LIMIT $2 FOR SHARE OF t),
		ins AS (INSERT INTO syncer_changes (source, num, key, deleted` + s.tenantColumns() + `)
			SELECT $1, ` + s.numSQL(rcols) + `, ` + text + `, false` + tenantVals + ` FROM r ORDER BY ` + strings.Join(rcols, ", ") + ` RETURNING seq)
		SELECT (SELECT count(*) FROM r), (SELECT ` + text + ` FROM r ORDER BY ` + strings.Join(desc, ", ") + ` LIMIT 1),
			COALESCE((SELECT max(seq) FROM ins), 0)`
}

// objectHash names a source's triggers and capture function: a hash of
// syncer's schema and the source's name, so that two installations (two
// schemas) exporting one table, or two sources of one table, never share a
// trigger, and a source's triggers are found again from its name.
func objectHash(schema, name string) string {
	h := sha256.Sum256([]byte(schema + "\x00" + name))
	return hex.EncodeToString(h[:8])
}

// triggerNameSQL is objectHash's trigger name in SQL, for the source
// named by nameExpr in the connection's current schema (syncer's): a
// statement that finds a source's trigger needs no round trip for it.
func triggerNameSQL(nameExpr, op string) string {
	return `'syncer_' || left(encode(sha256(convert_to(current_schema(), 'UTF8') || '\x00'::bytea || convert_to(` +
		nameExpr + `, 'UTF8')), 'hex'), 16) || '_` + op + `'`
}

// CaptureBrokenSQL is a condition on a row s of syncer_sources: true when
// the source's table is gone (dropped, or renamed away from its name) or
// has no enabled capture trigger of the source (dropped, disabled, or the
// table re-created). Nothing is written then, so no event comes and
// nothing is pending: the relay's poll gives such a source a job, whose
// Check stops it loudly.
var CaptureBrokenSQL = `NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger tg
	WHERE tg.tgrelid = to_regclass(format('%I.%I', s.schema_name, s.table_name))
		AND tg.tgname = ` + triggerNameSQL("s.name", "insert") + ` AND tg.tgenabled <> 'D')`

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
