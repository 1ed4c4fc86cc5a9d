package sources

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// Held is one row of a source's table as `syncer verify` compares it.
type Held struct {
	// Key is the key's text form, as items carry it.
	Key string
	// Payload is the item's payload as it would be sent now.
	Payload json.RawMessage
	// Kept is false for a row the source's filter leaves out: the third
	// party should not hold it.
	Kept bool
	// Pending is set while the key has changes still to export.
	Pending bool
	// Failed is set when the key's latest version was rejected (a row of
	// syncer_source_failures, for the tenant when one is asked): the
	// third party is not expected to hold it, and sending it again as it
	// is would be rejected again.
	Failed bool
}

// heldSQL reads the next rows of r after the cursor ($4, when after) in
// the key's order, from the table's primary key: $1 the source, $2 the
// limit, $3 the payload's field names when it has configured columns.
// With tenant (not ""), the last parameter, only the tenant's rows are
// read, and a key is pending when it has changes for the tenant (or not
// yet adopted by one: see AdoptUntenanted).
func (s *Source) heldSQL(r ReplayRange, after bool, tenant string) (string, []any) {
	next := 3
	if s.Columns != nil {
		next = 4
	}
	cond, args := s.rangeSQL(r, next)
	if after {
		cond += " AND " + rowSQL(s.keyColumns("t")) + " > " + rowSQL(s.keyValuesSQL("$"+strconv.Itoa(next+len(args))+"::text"))
		next++
	}
	ofTenant, failedOf := "", ""
	if tenant != "" {
		p := "$" + strconv.Itoa(next+len(args)) + "::text"
		cond += " AND " + s.tenantText("t") + " = " + p
		ofTenant = " AND (c.tenant = " + p + " OR c.tenant IS NULL)"
		failedOf = " AND f.tenant = " + p
	}
	cols := s.keyColumns("t")
	kept := "true"
	if s.Where != "" {
		kept = "coalesce((" + s.Where + "), false)"
	}
	return `SELECT k.key, k.payload, k.kept,
			EXISTS (SELECT 1 FROM syncer_changes c WHERE c.source = $1 AND c.num = k.num AND c.key = k.key` + ofTenant + `),
			EXISTS (SELECT 1 FROM syncer_source_failures f WHERE f.source = $1 AND f.key = k.key COLLATE "C"` + failedOf + `)
		FROM (SELECT ` + s.keyTextSQL(cols) + ` AS key, ` + s.numSQL(cols) + ` AS num, ` + s.payloadSQL("$3") + ` AS payload, ` + kept + ` AS kept
			FROM ` + s.table() + ` t WHERE ` + cond + ` ORDER BY ` + strings.Join(cols, ", ") + ` LIMIT $2) k`, args
}

// HeldPage returns up to limit rows of src's table in r, after the key
// after ("" for the first), in the key's order: the table as it is now,
// read by keyset from its primary key, each with whether the filter keeps
// it and whether its key has changes pending. A key deleted here is not
// read: its tombstone is forgotten once exported.
//
// Of a tenant's scope, only the tenant's rows are read (those whose
// tenant column is the tenant now), a key pending when it has changes for
// the tenant: a row that moved to another tenant is not read, so what the
// old tenant's account still holds of it is not seen by this run.
func HeldPage(ctx context.Context, q database.Querier, src *Source, sc Scope, r ReplayRange, after string, limit int) ([]Held, error) {
	if err := sc.check(src); err != nil {
		return nil, err
	}
	tenant := sc.Tenant
	sql, rangeArgs := src.heldSQL(r, after != "", tenant)
	args := []any{src.Name, limit}
	if src.Columns != nil {
		args = append(args, src.Columns)
	}
	args = append(args, rangeArgs...)
	if after != "" {
		args = append(args, after)
	}
	if tenant != "" {
		args = append(args, tenant)
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, src.explain(ctx, q, fmt.Errorf("sources: source %s: verify page: %w", src.Name, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Held, error) {
		var h Held
		var payload []byte
		err := row.Scan(&h.Key, &payload, &h.Kept, &h.Pending, &h.Failed)
		h.Payload = payload
		return h, err
	})
	if err != nil {
		return nil, src.explain(ctx, q, fmt.Errorf("sources: source %s: verify page: %w", src.Name, err))
	}
	return out, nil
}

// Resend logs a change for each key (`syncer verify --heal`), as a write
// would: each key is pending again at a new version, read through the
// filter when it is sent (a tombstone for a row filtered out or gone).
// Nothing is marked synced. It returns how many keys it logged. Of a
// tenant's scope, each key's change is logged with the tenant and its
// lane, so that lane sends it to the tenant's account (a tombstone when
// the row is gone or is another tenant's by then).
func Resend(ctx context.Context, q database.Querier, src *Source, sc Scope, keys []string) (int64, error) {
	if sc.Tenant != "" {
		return tenantResend(ctx, q, src, sc.Tenant, keys)
	}
	nums, err := src.nums(keys)
	if err != nil {
		return 0, err
	}
	tag, err := q.Exec(ctx, `INSERT INTO syncer_changes (source, num, key, deleted)
		SELECT $1, n, k, false FROM unnest($2::bigint[], $3::text[]) AS u(n, k)`, src.Name, nums, keys)
	if err != nil {
		return 0, fmt.Errorf("sources: source %s: resend: %w", src.Name, err)
	}
	// The third party was found not to hold these bodies: their digests
	// would settle the new versions as skipped, unsent.
	if err := unchanged.ForgetKeys(ctx, q, src.Name, keys); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// PendingOf returns those of keys that have changes pending now (see
// resources.PendingOf for why `syncer verify` asks). Of a tenant's scope,
// those with changes for the tenant (or for no tenant yet, which
// AdoptUntenanted gives the row's).
func PendingOf(ctx context.Context, q database.Querier, src *Source, sc Scope, keys []string) ([]string, error) {
	if sc.Tenant != "" {
		return tenantPendingOf(ctx, q, src, sc.Tenant, keys)
	}
	nums, err := src.nums(keys)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT DISTINCT c.key FROM syncer_changes c
		JOIN unnest($2::bigint[], $3::text[]) AS u(n, k) ON c.num = u.n AND c.key = u.k
		WHERE c.source = $1`, src.Name, nums, keys)
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: pending of: %w", src.Name, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: pending of: %w", src.Name, err)
	}
	return out, nil
}
