package sources_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/sources"
)

// Issue 44 with 43: one tenant's rows are read for verify by keyset
// within a range, pending only for changes of that tenant; a resend for
// the tenant is logged with it and its lane, so its lane sends it.
func TestTenantHeldPageAndResend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, name text)`)
	_, srcs := b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 4\n    destination: crm\n    snapshot: false\n")
	src := srcs["contacts"]
	b.exec(t, `INSERT INTO contacts SELECT g, CASE WHEN g % 2 = 1 THEN 'acme' ELSE 'globex' END, 'n' FROM generate_series(1, 12) g`)
	b.markTenant(t, src, "acme", b.tenantPending(t, src, "acme"))
	// globex's 2 stays pending; it is not acme's.
	globex := b.tenantPending(t, src, "globex")
	b.markTenant(t, src, "globex", globex[1:])

	r := sources.ReplayRange{FromKey: "2", ToKey: "11"}
	require.NoError(t, src.CheckRange(&r))
	var got []string
	after := ""
	for {
		page, err := sources.HeldPage(ctx, b.pool, src, sources.TenantOf(src, "acme"), r, after, 2)
		require.NoError(t, err)
		for _, h := range page {
			require.False(t, h.Pending, h.Key)
			got = append(got, h.Key)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Key
	}
	require.Equal(t, []string{"3", "5", "7", "9", "11"}, got)
	page, err := sources.HeldPage(ctx, b.pool, src, sources.TenantOf(src, "globex"), sources.ReplayRange{}, "", 1)
	require.NoError(t, err)
	require.Equal(t, "2", page[0].Key)
	require.True(t, page[0].Pending)

	n, err := sources.Resend(ctx, b.pool, src, sources.TenantOf(src, "acme"), []string{"3", "5"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	pending, err := sources.PendingOf(ctx, b.pool, src, sources.TenantOf(src, "acme"), []string{"2", "3", "5", "7"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"3", "5"}, pending)
	pending, err = sources.PendingOf(ctx, b.pool, src, sources.TenantOf(src, "globex"), []string{"2", "3", "5"})
	require.NoError(t, err)
	require.Equal(t, []string{"2"}, pending)
	require.Equal(t, []string{"3", "5"}, keys(b.tenantPending(t, src, "acme")), "in acme's lane, for acme")

	// A tenant's scope of a source without a tenant column is refused,
	// never read as every row.
	plain := *src
	plain.Tenant = ""
	_, err = sources.HeldPage(ctx, b.pool, &plain, sources.Scope{Tenant: "acme"}, r, "", 2)
	require.ErrorContains(t, err, "no tenant column")
}

// A run of every tenant pages each tenant apart: the pages its tenants'
// rows make are each tenant's rounded up, summed, not the rows' over a
// page (a periodic run spreads its lookups over them).
func TestTableTenantPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, name text)`)
	_, srcs := b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    destination: crm\n    snapshot: false\n")
	src := srcs["contacts"]
	pages, err := sources.TableTenantPages(ctx, b.pool, src, 10)
	require.NoError(t, err)
	require.Zero(t, pages, "no rows, no pages")
	// 30 tenants of a row and one of 25 rows (3 pages): 55 rows, 6 pages
	// had they been paged together.
	b.exec(t, `INSERT INTO contacts SELECT g, 't' || g, 'n' FROM generate_series(1, 30) g`)
	b.exec(t, `INSERT INTO contacts SELECT g, 'big', 'n' FROM generate_series(31, 55) g`)
	pages, err = sources.TableTenantPages(ctx, b.pool, src, 10)
	require.NoError(t, err)
	require.EqualValues(t, 33, pages)

	plain := *src
	plain.Tenant = ""
	_, err = sources.TableTenantPages(ctx, b.pool, &plain, 10)
	require.ErrorContains(t, err, "no tenant column")
}
