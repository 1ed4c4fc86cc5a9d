package sources

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// `syncer verify --tenant` (docs/protocol.md section 11): one tenant's
// rows of a source with a tenant column, checked against that tenant's
// account, healed for that tenant.

// tenantResend is Resend of a tenant's scope.
func tenantResend(ctx context.Context, q database.Querier, src *Source, tenant string, keys []string) (int64, error) {
	if err := src.checkTenant(tenant); err != nil {
		return 0, err
	}
	nums, err := src.nums(keys)
	if err != nil {
		return 0, err
	}
	tag, err := q.Exec(ctx, `INSERT INTO syncer_changes (source, num, key, deleted, tenant, lane)
		SELECT $1, n, k, false, $4, $5 FROM unnest($2::bigint[], $3::text[]) AS u(n, k)`,
		src.Name, nums, keys, tenant, Lane(tenant, src.Lanes))
	if err != nil {
		return 0, fmt.Errorf("sources: source %s: tenant %s: resend: %w", src.Name, tenant, err)
	}
	// As Resend: the digests of bodies the account was found not to hold
	// would settle the new versions unsent.
	if err := unchanged.ForgetKeys(ctx, q, src.Name, keys); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// tenantPendingOf is PendingOf of a tenant's scope.
func tenantPendingOf(ctx context.Context, q database.Querier, src *Source, tenant string, keys []string) ([]string, error) {
	if err := src.checkTenant(tenant); err != nil {
		return nil, err
	}
	nums, err := src.nums(keys)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT DISTINCT c.key FROM syncer_changes c
		JOIN unnest($2::bigint[], $3::text[]) AS u(n, k) ON c.num = u.n AND c.key = u.k
		WHERE c.source = $1 AND (c.tenant = $4 OR c.tenant IS NULL)`, src.Name, nums, keys, tenant)
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: tenant %s: pending of: %w", src.Name, tenant, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: tenant %s: pending of: %w", src.Name, tenant, err)
	}
	return out, nil
}

// checkTenant refuses a tenant call on a source without a tenant column,
// or without a tenant.
func (s *Source) checkTenant(tenant string) error {
	switch {
	case s.Tenant == "":
		return fmt.Errorf("sources: source %s has no tenant column", s.Name)
	case tenant == "":
		return fmt.Errorf("sources: source %s: no tenant given", s.Name)
	}
	return nil
}

// TableTenants returns up to n tenants that have rows in src's table, in
// order after after ("" starts at the first): a background verify of a
// source whose destination has a tenants block goes through them a page
// at a time (each page one bounded statement), verifying each tenant
// against its own account.
func TableTenants(ctx context.Context, q database.Querier, src *Source, after tenant.Tenant, n int) ([]tenant.Tenant, error) {
	if src.Tenant == "" {
		return nil, fmt.Errorf("sources: source %s has no tenant column", src.Name)
	}
	// "C" order, so a page's after is the same point whatever the
	// database's collation.
	t := src.tenantText("t") + ` COLLATE "C"`
	rows, err := q.Query(ctx, `SELECT DISTINCT `+t+` FROM `+src.table()+` t
		WHERE `+t+` > $1 ORDER BY 1 LIMIT $2`, after, max(n, 1))
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: tenants of its rows: %w", src.Name, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[tenant.Tenant])
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: tenants of its rows: %w", src.Name, err)
	}
	return out, nil
}

// TableTenantPages is how many pages of size rows the tenants' rows of
// src's table make, each tenant's paged apart as a verify run of every
// tenant reads them: the sum over the tenants of ceil(rows/size), from
// the rows of each tenant counted in one statement (a scan of the table,
// once a periodic run). A background run spreads its lookups over them.
func TableTenantPages(ctx context.Context, q database.Querier, src *Source, size int) (int64, error) {
	if src.Tenant == "" {
		return 0, fmt.Errorf("sources: source %s has no tenant column", src.Name)
	}
	// Grouped as TableTenants orders them, so a tenant is one here as
	// it is one there.
	t := src.tenantText("t") + ` COLLATE "C"`
	var pages int64
	err := q.QueryRow(ctx, `SELECT COALESCE(sum((c.n + $1 - 1) / $1), 0)::bigint
		FROM (SELECT count(*) AS n FROM `+src.table()+` t GROUP BY `+t+`) c`,
		int64(max(size, 1))).Scan(&pages)
	if err != nil {
		return 0, fmt.Errorf("sources: source %s: pages of its tenants' rows: %w", src.Name, err)
	}
	return pages, nil
}
