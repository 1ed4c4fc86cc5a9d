package sources

// Tenants (docs/protocol.md section 10): a source with a tenant column logs
// each change with the row's tenant and the lane the tenant hashes to, and
// is read lane by lane, each lane's tenants taking turns.

import (
	"context"
	"crypto/md5" //nolint:gosec // a stable hash, not a secret: see Lane
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/replays"
)

// Lane is the lane of tenant among lanes: the first 32 bits of the
// tenant's MD5, big-endian, modulo lanes. The capture functions compute
// the same in SQL (laneSQL). MD5 because it is the same in every
// PostgreSQL version and in Go: hashtext, PostgreSQL's own, is not
// promised to stay the same across major versions, and a tenant whose
// changes sat in two lanes could be exported by two daemons at once.
func Lane(tenant string, lanes int) int {
	if lanes <= 1 {
		return 0
	}
	h := md5.Sum([]byte(tenant)) //nolint:gosec // see above
	return int(binary.BigEndian.Uint32(h[:4]) % uint32(lanes))
}

// laneSQL is Lane in SQL, of a text expression and an integer expression
// of lanes, every name qualified (it runs in capture functions that pin no
// search_path).
func laneSQL(tenant, lanes string) string {
	return "CAST(CAST(CAST('x' OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.md5(" + tenant +
		"), 8) AS pg_catalog.bit(32)) AS pg_catalog.int8) OPERATOR(pg_catalog.%) (" + lanes + ") AS pg_catalog.int4)"
}

// tenantText is the tenant of the row aliased alias, as text.
func (s *Source) tenantText(alias string) string {
	return "CAST(" + alias + "." + pgx.Identifier{s.Tenant}.Sanitize() + " AS pg_catalog.text)"
}

// tenantColumns is what a change of a tenant source adds to syncer_changes'
// columns (source, num, key, deleted); empty without a tenant.
func (s *Source) tenantColumns() string {
	if s.Tenant == "" {
		return ""
	}
	return ", tenant, lane"
}

// tenantValues is the tenant and lane of the row aliased alias, for
// tenantColumns; empty without a tenant.
func (s *Source) tenantValues(alias string) string {
	if s.Tenant == "" {
		return ""
	}
	t := s.tenantText(alias)
	return ", " + t + ", " + laneSQL(t, strconv.Itoa(s.Lanes))
}

// sameTenant is a condition that rows n and o have one tenant; empty
// without a tenant. A row whose tenant changed is a tombstone for the old
// tenant and the row for the new, as a row that no longer matches a filter
// is gone.
func (s *Source) sameTenant(n, o string) string {
	if s.Tenant == "" {
		return ""
	}
	col := pgx.Identifier{s.Tenant}.Sanitize()
	return " AND ROW(" + n + "." + col + ") OPERATOR(pg_catalog.=) ROW(" + o + "." + col + ")"
}

// setLanes records the source's tenant column and lanes, and when relane
// (its lanes changed), moves its pending changes to their new lanes.
func setLanes(ctx context.Context, tx pgx.Tx, s *Source, relane bool) error {
	if _, err := tx.Exec(ctx, `UPDATE syncer_sources SET tenant_column = NULLIF($2, ''), lanes = $3 WHERE name = $1`,
		s.Name, s.Tenant, s.Lanes); err != nil {
		return fmt.Errorf("record tenant and lanes: %w", err)
	}
	if !relane || s.Tenant == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE syncer_changes SET lane = `+laneSQL("tenant", "$2::int")+`
		WHERE source = $1 AND tenant IS NOT NULL`, s.Name, s.Lanes); err != nil {
		return fmt.Errorf("move pending changes to their lanes: %w", err)
	}
	return nil
}

// relogLaneSQL is the lane of a change logged again for the tenant of a
// row aliased f (a failure) of the source $1.
var relogLaneSQL = laneSQL("f.tenant", "SELECT s.lanes FROM syncer_sources s WHERE s.name = $1")

// TenantsTurnMax is how many tenants one Tenants call returns at most.
const TenantsTurnMax = 64

const tenantsSQL = `WITH RECURSIVE t(tenant) AS (
		(SELECT c.tenant FROM syncer_changes c WHERE c.source = $1 AND c.lane = $2 AND c.tenant IS NOT NULL AND c.tenant > $3
			ORDER BY c.tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT c.tenant FROM syncer_changes c WHERE c.source = $1 AND c.lane = $2 AND c.tenant IS NOT NULL AND c.tenant > t.tenant
			ORDER BY c.tenant LIMIT 1) FROM t WHERE t.tenant IS NOT NULL)
	SELECT tenant FROM t WHERE tenant IS NOT NULL AND NOT (tenant = ANY($4::text[])) LIMIT $5`

// tenantsAroundSQL is tenantsSQL after $3 and then, wrapping around,
// from the first tenant up to $3 (its walk stops there): one statement,
// so a look-up that wraps around waits for the pool once. Its two walks
// were two statements, each an acquire of the pool's (1.8 a look-up in
// the own-limits row of syncer-lab bench, where lanes of 8 to 15 tenants
// look 16 up and wrap around at nearly every turn; issue 54). An Append
// under a LIMIT reads its second walk only when the first falls short.
const tenantsAroundSQL = `WITH RECURSIVE t(tenant) AS (
		(SELECT c.tenant FROM syncer_changes c WHERE c.source = $1 AND c.lane = $2 AND c.tenant IS NOT NULL AND c.tenant > $3
			ORDER BY c.tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT c.tenant FROM syncer_changes c WHERE c.source = $1 AND c.lane = $2 AND c.tenant IS NOT NULL AND c.tenant > t.tenant
			ORDER BY c.tenant LIMIT 1) FROM t WHERE t.tenant IS NOT NULL),
	w(tenant) AS (
		(SELECT c.tenant FROM syncer_changes c WHERE c.source = $1 AND c.lane = $2 AND c.tenant IS NOT NULL AND c.tenant >= ''
			ORDER BY c.tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT c.tenant FROM syncer_changes c WHERE c.source = $1 AND c.lane = $2 AND c.tenant IS NOT NULL AND c.tenant > w.tenant
			ORDER BY c.tenant LIMIT 1) FROM w WHERE w.tenant IS NOT NULL AND w.tenant < $3)
	(SELECT tenant FROM t WHERE tenant IS NOT NULL AND NOT (tenant = ANY($4::text[])) LIMIT $5)
	UNION ALL
	(SELECT tenant FROM w WHERE tenant IS NOT NULL AND tenant <= $3 AND NOT (tenant = ANY($4::text[])) LIMIT $5)
	LIMIT $5`

// Tenants returns up to n tenants of lane that have pending changes, in
// the tenants' order starting after after (an empty after starts at the
// first) and wrapping around to the first: so a lane serves its tenants in
// turn, each after the one served last, and none starves. Tenants in skip
// (those not ready this pass) are left out.
func Tenants(ctx context.Context, q database.Querier, src *Source, lane int, after string, skip []string, n int) ([]string, error) {
	n = min(max(n, 1), TenantsTurnMax)
	if skip == nil {
		skip = []string{}
	}
	sql := tenantsAroundSQL
	if after == "" {
		// Every tenant: '' sorts first in "C", and >= takes it too.
		sql = strings.Replace(tenantsSQL, "c.tenant > $3\n", "c.tenant >= $3\n", 1)
	}
	rows, err := q.Query(ctx, sql, src.Name, lane, after, skip, n)
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: lane %d: tenants: %w", src.Name, lane, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: lane %d: tenants: %w", src.Name, lane, err)
	}
	return out, nil
}

// tenantPending is PendingKept of a tenant's scope: the tenant's next
// batch of pending items in key order, after afterKey unless first. An
// item is a tombstone when its row is gone or belongs to another tenant
// now (its move logged the row for the new tenant). Each item comes with
// the digest kept for the tenant's key (Row.Kept), as PendingKept's do.
func tenantPending(ctx context.Context, q database.Querier, src *Source, lane int, tenant, afterKey string, first bool, lim feed.Limits) (Page, error) {
	if src.Tenant == "" {
		return Page{}, fmt.Errorf("sources: source %s has no tenant column", src.Name)
	}
	if err := lim.Validate(); err != nil {
		return Page{}, fmt.Errorf("sources: %s: pending: %w", src.Name, err)
	}
	sql, args := src.sql.tenantFirst, []any{src.Name, lim.Items, lim.MaxItemBytes, lane, tenant}
	if !first {
		num, err := src.num(afterKey)
		if err != nil {
			return Page{}, err
		}
		sql, args = src.sql.tenantAfter, append(args, num, afterKey)
	}
	if src.Columns != nil {
		args = append(args, src.Columns)
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, src.explain(ctx, q, fmt.Errorf("sources: source %s: select pending of a tenant: %w", src.Name, err))
	}
	out, end, err := collect(rows, lim, true)
	if err != nil {
		return Page{}, src.explain(ctx, q, fmt.Errorf("sources: source %s: %w", src.Name, err))
	}
	return Page{Rows: out, End: end}, nil
}

// LanesWithWork returns those of lanes of the tenant source name that have
// work: pending changes in the lane, and for lane 0, which does the
// source's side work, an unfinished snapshot, a waiting replay or a broken
// capture.
func LanesWithWork(ctx context.Context, q database.Querier, name string, lanes []int) ([]int, error) {
	rows, err := q.Query(ctx, `SELECT l FROM unnest($2::int[]) l WHERE EXISTS (
			SELECT 1 FROM syncer_changes c WHERE c.source = $1 AND c.lane = l AND c.tenant IS NOT NULL)`, name, lanes)
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: lanes with work: %w", name, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: lanes with work: %w", name, err)
	}
	if slices.Contains(lanes, 0) && !slices.Contains(out, 0) {
		side, err := SideWork(ctx, q, []string{name})
		if err != nil {
			return nil, err
		}
		if len(side) > 0 {
			out = append(out, 0)
		}
	}
	return out, nil
}

// SideWork returns those of names that have work beside their pending
// changes: a snapshot unfinished, a replay waiting, a capture broken.
func SideWork(ctx context.Context, q database.Querier, names []string) ([]string, error) {
	replaying, err := replays.SourcesWaiting(ctx, q, names)
	if err != nil {
		return nil, fmt.Errorf("sources: side work: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT s.name FROM syncer_sources s WHERE s.name = ANY($1)
		AND (s.snapshot_state IN ('pending', 'running') OR s.name = ANY($2) OR `+CaptureBrokenSQL+`)`, names, replaying)
	if err != nil {
		return nil, fmt.Errorf("sources: side work: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sources: side work: %w", err)
	}
	return out, nil
}

// The marks of a tenant's items: those of MarkSynced and MarkFailed, on
// the tenant's changes only ($5 in marks, $6 in failures), so a key that
// moved to another tenant keeps the other tenant's changes pending, and
// its failure is the tenant's (source, tenant, key; migration 028): a
// failure at one tenant neither replaces nor clears another's.
var (
	markSyncedTenantSQL = strings.Replace(strings.Replace(markSyncedSQL, "c.seq <= b.version", "c.seq <= b.version AND c.tenant = $5::text", 1),
		"f.version <= b.version", "f.version <= b.version AND f.tenant IS NOT DISTINCT FROM $5::text", 1)
	markFailedTenantSQL = strings.Replace(strings.Replace(strings.Replace(markFailedSQL,
		"c.seq <= b.version", "c.seq <= b.version AND c.tenant = $6::text", 1),
		"(source, key, num, version, error)\n\t\tSELECT $1, b.key, b.num, b.version, b.error FROM b",
		"(source, key, num, version, error, tenant)\n\t\tSELECT $1, b.key, b.num, b.version, b.error, $6::text FROM b", 1),
		"ON CONFLICT (source, key) WHERE tenant IS NULL", "ON CONFLICT (source, tenant, key) WHERE tenant IS NOT NULL", 1)
)

// queueTenantMarks is QueueMarks of a tenant's scope.
func queueTenantMarks(b *pgx.Batch, src *Source, tenant string, accepted []string, acceptedVersions []int64, rejected []string, rejectedVersions []int64, errs []string) error {
	if err := queueMark(b, src, "mark synced", markSyncedTenantSQL, accepted, acceptedVersions, tenant); err != nil {
		return err
	}
	if len(rejected) == 0 {
		return nil
	}
	return queueMark(b, src, "mark failed", markFailedTenantSQL, rejected, rejectedVersions, errs, tenant)
}

// adoptMax bounds the changes one AdoptUntenanted statement gives a tenant.
const adoptMax = 10000

// AdoptUntenanted gives the changes of a tenant source logged without a
// tenant (a key resent by `syncer verify --heal`, a failure recorded before
// migration 022 retried) the tenant of their row, and its lane, so the
// lane of that tenant sends them; a change whose row is gone has no
// tenant to go to, and is dropped. It returns how many changes it adopted.
// Lane 0 runs it as each of its jobs starts.
func AdoptUntenanted(ctx context.Context, q database.Querier, src *Source) (int64, error) {
	if src.Tenant == "" {
		return 0, nil
	}
	match, keyJSON := src.keyMatch()
	tenant := src.tenantText("t")
	var total int64
	for {
		tag, err := q.Exec(ctx, `WITH k AS (SELECT c.ctid AS at, c.num, c.key`+keyJSON+` FROM syncer_changes c
				WHERE c.source = $1 AND c.tenant IS NULL LIMIT `+strconv.Itoa(adoptMax)+`),
			r AS (SELECT k.at, (SELECT `+tenant+` FROM `+src.table()+` t WHERE `+match+` LIMIT 1) AS tenant FROM k),
			gone AS (DELETE FROM syncer_changes c USING r WHERE c.ctid = r.at AND r.tenant IS NULL)
			UPDATE syncer_changes c SET tenant = r.tenant, lane = `+laneSQL("r.tenant", strconv.Itoa(src.Lanes))+`
			FROM r WHERE c.ctid = r.at AND r.tenant IS NOT NULL`, src.Name)
		if err != nil {
			return total, fmt.Errorf("sources: source %s: adopt changes without a tenant: %w", src.Name, err)
		}
		// The DELETE's rows are not in the tag: a short round says the
		// last one was read.
		total += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			return total, nil
		}
	}
}
