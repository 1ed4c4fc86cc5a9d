package sources

// What status, the console and the gauges read of a tenant source's
// tenants (docs/protocol.md section 10, "Seen and acted on"): each
// tenant's pending keys, counted from the lane index, and its failures.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// TenantCountCap bounds how many changes TenantBacklog reads for its
// counts, as StatsCountCap bounds Stats': beyond it the counts are those
// of the changes read.
const TenantCountCap = 1_000_000

// TenantRows is one tenant's rows: its pending keys, its failed keys
// (those not changed since) and the age of its oldest pending change.
type TenantRows struct {
	Tenant  string
	Pending int64
	Failed  int64
	// OldestPending is the age of its oldest pending change; set for the
	// tenants of TenantBacklog.Top (and of one tenant asked for) only.
	OldestPending time.Duration
}

// TenantBacklog is a tenant source's tenants with rows.
type TenantBacklog struct {
	// Rows are every tenant with pending or failed keys, by tenant.
	Rows map[string]*TenantRows
	// Top are the top tenants by pending keys, most first (ties by
	// tenant), with their OldestPending.
	Top []*TenantRows
}

// Pending are the pending keys of every tenant of Rows, by tenant.
func (b TenantBacklog) Pending() map[string]int64 {
	out := make(map[string]int64, len(b.Rows))
	for name, r := range b.Rows {
		out[name] = r.Pending
	}
	return out
}

// tenantPendingSQL counts each tenant's pending keys through the lane
// index (source, lane, tenant, num, key, seq): an index-only read of at
// most $2 changes, grouped; the first seq of each is kept to find its age
// for the few tenants shown.
const tenantPendingSQL = `SELECT c.tenant, count(DISTINCT (c.num, c.key)), min(c.seq)
	FROM (SELECT tenant, num, key, seq FROM syncer_changes WHERE source = $1 AND tenant IS NOT NULL
		AND ($3::text IS NULL OR tenant = $3) LIMIT $2) c
	GROUP BY c.tenant`

// tenantFailedSQL counts each tenant's failed keys that have not changed
// since (those RecentFailures shows).
const tenantFailedSQL = `SELECT f.tenant, count(*) FROM syncer_source_failures f
	WHERE f.source = $1 AND f.tenant IS NOT NULL AND ($2::text IS NULL OR f.tenant = $2)
		AND NOT EXISTS (SELECT 1 FROM syncer_changes c WHERE c.source = f.source AND c.num = f.num AND c.key = f.key)
	GROUP BY f.tenant`

// TenantsBacklog returns the tenants of source src with pending or failed
// keys, and the top of them by pending keys with their oldest pending
// age. A non-empty only reads that tenant alone (its entry in Rows and
// Top, even with nothing pending).
//
// keep, when not nil, says which tenants Top may hold (a state's, for the
// console's view of one state); Rows holds every tenant.
func TenantsBacklog(ctx context.Context, q database.Querier, src string, top int, only string, keep func(tenant string) bool) (TenantBacklog, error) {
	var filter *string
	if only != "" {
		filter = &only
	}
	out := TenantBacklog{Rows: map[string]*TenantRows{}}
	get := func(t string) *TenantRows {
		r := out.Rows[t]
		if r == nil {
			r = &TenantRows{Tenant: t}
			out.Rows[t] = r
		}
		return r
	}
	first := map[string]int64{}
	rows, err := q.Query(ctx, tenantPendingSQL, src, TenantCountCap, filter)
	if err != nil {
		return out, fmt.Errorf("sources: source %s: tenants' pending: %w", src, err)
	}
	var tenant string
	var n, seq int64
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &n, &seq}, func() error {
		get(tenant).Pending, first[tenant] = n, seq
		return nil
	}); err != nil {
		return out, fmt.Errorf("sources: source %s: tenants' pending: %w", src, err)
	}
	rows, err = q.Query(ctx, tenantFailedSQL, src, filter)
	if err != nil {
		return out, fmt.Errorf("sources: source %s: tenants' failures: %w", src, err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &n}, func() error {
		get(tenant).Failed = n
		return nil
	}); err != nil {
		return out, fmt.Errorf("sources: source %s: tenants' failures: %w", src, err)
	}
	if only != "" {
		get(only)
	}
	kept := out.Rows
	if keep != nil {
		kept = map[string]*TenantRows{}
		for t, r := range out.Rows {
			if keep(t) {
				kept[t] = r
			}
		}
	}
	out.Top = TopTenants(kept, top)
	var seqs []int64
	for _, r := range out.Top {
		if s, ok := first[r.Tenant]; ok {
			seqs = append(seqs, s)
		}
	}
	if len(seqs) == 0 {
		return out, nil
	}
	rows, err = q.Query(ctx, `SELECT tenant, EXTRACT(EPOCH FROM now() - changed_at)::float8 FROM syncer_changes
		WHERE source = $1 AND tenant IS NOT NULL AND seq = ANY($2)`, src, seqs)
	if err != nil {
		return out, fmt.Errorf("sources: source %s: tenants' oldest pending: %w", src, err)
	}
	var age float64
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &age}, func() error {
		get(tenant).OldestPending = time.Duration(max(age, 0) * float64(time.Second))
		return nil
	}); err != nil {
		return out, fmt.Errorf("sources: source %s: tenants' oldest pending: %w", src, err)
	}
	return out, nil
}

// TopTenants returns the n tenants of rows with the most pending keys,
// most first, then the most failed, then by tenant.
func TopTenants(rows map[string]*TenantRows, n int) []*TenantRows {
	all := make([]*TenantRows, 0, len(rows))
	for _, r := range rows {
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *TenantRows) int {
		return cmp.Or(cmp.Compare(b.Pending, a.Pending), cmp.Compare(b.Failed, a.Failed), strings.Compare(a.Tenant, b.Tenant))
	})
	return all[:min(n, len(all))]
}

// TenantSources returns the installed sources with a tenant column, by
// name, with their tenant column.
func TenantSources(ctx context.Context, q database.Querier) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT name, tenant_column FROM syncer_sources WHERE tenant_column IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("sources: tenant sources: %w", err)
	}
	out := map[string]string{}
	var name, col string
	if _, err := pgx.ForEachRow(rows, []any{&name, &col}, func() error {
		out[name] = col
		return nil
	}); err != nil {
		return nil, fmt.Errorf("sources: tenant sources: %w", err)
	}
	return out, nil
}

// retryFailedTenant is RetryFailed of a tenant's scope.
func retryFailedTenant(ctx context.Context, e database.Querier, src, tenant string) (int64, error) {
	tag, err := e.Exec(ctx, `WITH f AS (DELETE FROM syncer_source_failures WHERE source = $1 AND tenant = $2 RETURNING num, key, tenant)
		INSERT INTO syncer_changes (source, num, key, deleted, tenant, lane) SELECT $1, num, key, false, f.tenant, `+relogLaneSQL+` FROM f ORDER BY num, key`, src, tenant)
	if err != nil {
		return 0, fmt.Errorf("sources: source %s: retry failed of a tenant: %w", src, err)
	}
	return tag.RowsAffected(), nil
}

// HasTenant reports whether tenant has anything in src, a source with a
// tenant column: a change pending or a failure for it (indexed reads
// first), else a row of the table whose tenant column is tenant. A command
// that names a tenant (pause, replay, retry-failed...) asks it, so that a
// typo is refused rather than acted on (docs/protocol.md section 10.1,
// "Commands name real tenants"). The table's read is one EXISTS, stopped
// at its first row.
func HasTenant(ctx context.Context, q database.Querier, src *Source, t tenant.Tenant) (bool, error) {
	if err := src.checkTenant(t.String()); err != nil {
		return false, err
	}
	var found bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM syncer_changes WHERE source = $1 AND tenant = $2)
		OR EXISTS (SELECT 1 FROM syncer_source_failures WHERE source = $1 AND tenant = $2)
		OR EXISTS (SELECT 1 FROM `+src.table()+` t WHERE `+src.tenantText("t")+` = $2)`, src.Name, t.String()).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("sources: source %s: tenant %s: %w", src.Name, t, err)
	}
	return found, nil
}
