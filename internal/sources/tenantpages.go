package sources

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// TenantRead is one tenant's part of a TenantsPending read: its items
// after After (a Row.Key it was given before), from its first when First,
// up to Pages pages of the read's limits.
type TenantRead struct {
	Tenant string
	After  string
	First  bool
	Pages  int
}

// TenantsPending is tenantPending (PendingKept of a tenant's scope) of
// several tenants of one lane in one statement: for each of reads, in its
// order, the tenant's next items after its cursor, in key order, within
// its Pages times lim (lim.Items*Pages items, lim.Bytes*Pages bytes; a
// read of one page each gives what tenantPending would have). A lane's
// turn of a dozen tenants read one statement each waited a dozen times
// for one of the pool's connections (about 15 ms each under load in the
// bench's busiest lanes, issue 54): one statement waits once.
func TenantsPending(ctx context.Context, q database.Querier, src *Source, lane int, reads []TenantRead, lim feed.Limits) ([]Page, error) {
	if src.Tenant == "" {
		return nil, fmt.Errorf("sources: source %s has no tenant column", src.Name)
	}
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("sources: %s: pending: %w", src.Name, err)
	}
	if len(reads) == 0 {
		return nil, nil
	}
	tenants := make([]string, len(reads))
	nums := make([]int64, len(reads))
	keys := make([]string, len(reads))
	items := make([]int32, len(reads))
	lims := make([]feed.Limits, len(reads))
	for i, r := range reads {
		n := max(r.Pages, 1)
		tenants[i], items[i] = r.Tenant, int32(lim.Items*n)
		lims[i] = lim
		lims[i].Items, lims[i].Bytes = lim.Items*n, lim.Bytes*n
		// From the first: before every key. An integer key's text is
		// never empty, and other kinds' num is 0.
		nums[i] = math.MinInt64
		if !r.First {
			num, err := src.num(r.After)
			if err != nil {
				return nil, err
			}
			nums[i], keys[i] = num, r.After
		}
	}
	args := []any{src.Name, tenants, lim.MaxItemBytes, lane, nums, keys, items}
	if src.Columns != nil {
		args = append(args, src.Columns)
	}
	rows, err := q.Query(ctx, src.sql.tenantsPages, args...)
	if err != nil {
		return nil, src.explain(ctx, q, fmt.Errorf("sources: source %s: select pending of tenants: %w", src.Name, err))
	}
	pages, err := collectTenants(rows, lims)
	if err != nil {
		return nil, src.explain(ctx, q, fmt.Errorf("sources: source %s: %w", src.Name, err))
	}
	return pages, nil
}

// tenantsPagesSQL reads TenantsPending's pages: $1 the source, $2 the
// tenants, $3 the largest payload, $4 the lane, each tenant's cursor ($5
// nums, $6 keys) and item limit ($7), then the payload's field names. Each
// row says its tenant by its place in $2 (from 1), first; the rest are
// tenantSQL's.
func (s *Source) tenantsPagesSQL() string {
	if s.Tenant == "" {
		return ""
	}
	match, keyJSON := s.keyMatch()
	return `SELECT q.ord, k.key, k.version, r.found IS NULL,
			CASE WHEN pg_column_size(r.payload) <= $3 THEN r.payload END, coalesce(pg_column_size(r.payload), 0), k.captured, ` +
		unchanged.KeptSQL("$1::text", "q.tenant", "k.key") + `
		FROM unnest($2::text[], $5::bigint[], $6::text[], $7::int4[]) WITH ORDINALITY AS q(tenant, num, key, lim, ord)
		CROSS JOIN LATERAL (SELECT c.num, c.key` + keyJSON + `, max(c.seq) AS version, max(c.changed_at) AS captured FROM syncer_changes c
			WHERE c.source = $1 AND c.lane = $4 AND c.tenant = q.tenant AND (c.num, c.key) > (q.num, q.key)
			GROUP BY c.num, c.key ORDER BY c.num, c.key LIMIT q.lim) k
		LEFT JOIN LATERAL (SELECT true AS found, ` + s.payloadSQL("$8") + ` AS payload FROM ` + s.table() + ` t
			WHERE ` + match + ` AND ` + s.tenantText("t") + ` = q.tenant` + s.filterAnd() + ` LIMIT 1) r ON true
		ORDER BY q.ord, k.num, k.key`
}

// collectTenants is collect of TenantsPending's rows: each tenant's
// (its place in lims, from 1, first) cut by its own limits.
func collectTenants(rows pgx.Rows, lims []feed.Limits) ([]Page, error) {
	defer rows.Close()
	pages := make([]Page, len(lims))
	type state struct{ size, read int }
	st := make([]state, len(lims))
	cut := make([]bool, len(lims))
	var arena []byte
	type span struct{ page, row, start, end int }
	var spans []span
	var r Row
	var stored, ord int64
	dest := []any{&ord, &r.Key, &r.Version, &r.Deleted, nil, &stored, &r.Captured, &r.Kept}
	for rows.Next() {
		r, stored = Row{}, 0
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		i := int(ord) - 1
		if i < 0 || i >= len(lims) {
			return nil, fmt.Errorf("read pending: tenant %d of %d", ord, len(lims))
		}
		st[i].read++
		if cut[i] {
			continue
		}
		lim := lims[i]
		raw := rows.RawValues()[4]
		if raw != nil && rows.FieldDescriptions()[4].Format == pgx.BinaryFormatCode && len(raw) > 0 {
			raw = raw[1:] // jsonb's binary form is a version byte, then the text
		}
		if !r.Deleted && (raw == nil || len(raw) > lim.MaxItemBytes) {
			r.Oversize = max(stored, int64(len(raw)))
			raw = nil
		}
		if len(pages[i].Rows) > 0 && st[i].size+len(raw) > lim.Bytes {
			cut[i] = true
			continue
		}
		if raw != nil {
			start := len(arena)
			arena = append(arena, raw...)
			spans = append(spans, span{i, len(pages[i].Rows), start, len(arena)})
		}
		st[i].size += len(raw)
		pages[i].Rows = append(pages[i].Rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pending: %w", err)
	}
	// The arena may have moved while it grew: slice it only now.
	for _, sp := range spans {
		pages[sp.page].Rows[sp.row].Payload = arena[sp.start:sp.end:sp.end]
	}
	for i := range pages {
		pages[i].End = !cut[i] && st[i].read < lims[i].Items
	}
	return pages, nil
}
