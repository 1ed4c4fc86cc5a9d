package sources_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

// tenantPending reads every pending item of tenant in its lane.
func (b *bundle) tenantPending(t *testing.T, src *sources.Source, tenant string) []sources.Row {
	t.Helper()
	lane := sources.Lane(tenant, src.Lanes)
	var out []sources.Row
	after, first := "", true
	for {
		p, err := sources.PendingKept(context.Background(), b.pool, src, sources.Scope{Tenant: tenant, Lane: lane}, after, first, feed.Limits{Items: 2}.WithDefaults())
		require.NoError(t, err)
		// The same page read in one statement with other tenants'
		// (TenantsPending), their pages their own.
		many, err := sources.TenantsPending(context.Background(), b.pool, src, lane,
			[]sources.TenantRead{{Tenant: "nosuch", First: true, Pages: 3}, {Tenant: tenant, After: after, First: first, Pages: 1}, {Tenant: tenant, First: true, Pages: 2}},
			feed.Limits{Items: 2}.WithDefaults())
		require.NoError(t, err)
		require.Len(t, many, 3)
		require.Empty(t, many[0].Rows)
		require.True(t, many[0].End)
		require.Equal(t, p, many[1], "one page, as tenantPending reads it")
		all, err := sources.PendingKept(context.Background(), b.pool, src, sources.Scope{Tenant: tenant, Lane: lane}, "", true, feed.Limits{Items: 4}.WithDefaults())
		require.NoError(t, err)
		require.Equal(t, all, many[2], "two pages from the first")
		// Cut by bytes (a row larger than a page alone) and by the
		// largest payload, each tenant by its own.
		small := feed.Limits{Items: 5, Bytes: 12, MaxItemBytes: 14}
		one, err := sources.PendingKept(context.Background(), b.pool, src, sources.Scope{Tenant: tenant, Lane: lane}, after, first, small)
		require.NoError(t, err)
		many, err = sources.TenantsPending(context.Background(), b.pool, src, lane,
			[]sources.TenantRead{{Tenant: tenant, First: true, Pages: 2}, {Tenant: tenant, After: after, First: first, Pages: 1}}, small)
		require.NoError(t, err)
		require.Equal(t, one, many[1], "cut as tenantPending cuts")
		if len(p.Rows) == 0 {
			return out
		}
		out = append(out, p.Rows...)
		after, first = p.Rows[len(p.Rows)-1].Key, false
	}
}

func (b *bundle) markTenant(t *testing.T, src *sources.Source, tenant string, rows []sources.Row) {
	t.Helper()
	var ks []string
	var vs []int64
	for _, r := range rows {
		ks, vs = append(ks, r.Key), append(vs, r.Version)
	}
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := sources.QueueMarks(batch, src, sources.Scope{Tenant: tenant}, ks, vs, nil, nil, nil); err != nil {
			return err
		}
		return tx.SendBatch(context.Background(), batch).Close()
	}))
}

// Issue 43: a change carries its row's tenant and the tenant's lane (the
// same in SQL as in Go); a row moved to another tenant is a tombstone for
// the old and the row for the new, on a table and on a partitioned table
// (statement and row triggers); a lane's tenants are served in turn,
// after the one served last.
func TestTenantCaptureAndMove(t *testing.T) {
	t.Parallel()
	tableAndPartitioned(t, "contacts", `(id bigint PRIMARY KEY, account text NOT NULL, name text)`, func(t *testing.T, b *bundle) {
		_, srcs := b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 4\n    columns: [name]\n    destination: crm\n    snapshot: false\n")
		src := srcs["contacts"]
		require.Equal(t, "account", src.Tenant)
		require.Equal(t, 4, src.Lanes)

		inserted := b.write(t, `INSERT INTO contacts VALUES (1, 'acme', 'a'), (2, 'acme', 'b'), (150, 'globex', 'c')`)
		for _, tenant := range []string{"acme", "globex"} {
			require.Equal(t, 0, b.count(t, `SELECT count(*) FROM syncer_changes WHERE source = 'contacts' AND tenant = $1 AND lane <> $2`,
				tenant, sources.Lane(tenant, 4)), "the lane in SQL is Lane's")
		}
		acme := b.tenantPending(t, src, "acme")
		require.Equal(t, []string{"1", "2"}, keys(acme))
		for _, r := range acme {
			require.True(t, inserted.Equal(r.Captured), "captured when the insert's transaction began: %v, not %v", inserted, r.Captured)
		}
		require.Equal(t, []string{"150"}, keys(b.tenantPending(t, src, "globex")))
		b.markTenant(t, src, "acme", acme)
		b.markTenant(t, src, "globex", b.tenantPending(t, src, "globex"))

		// Moved, its exported columns unchanged: a tombstone at acme,
		// the row at globex.
		at := b.write(t, `UPDATE contacts SET account = 'globex' WHERE id = 2`)
		old := b.tenantPending(t, src, "acme")
		require.Equal(t, []string{"2"}, keys(old))
		require.True(t, old[0].Deleted, "gone from the old tenant")
		moved := b.tenantPending(t, src, "globex")
		require.Equal(t, []string{"2"}, keys(moved))
		require.False(t, moved[0].Deleted)
		for _, r := range []sources.Row{old[0], moved[0]} {
			require.True(t, at.Equal(r.Captured), "both captured by the move: %v, not %v", at, r.Captured)
		}
		require.JSONEq(t, `{"name": "b"}`, string(moved[0].Payload))
		// Marking one tenant's leaves the other's pending.
		b.markTenant(t, src, "globex", moved)
		require.Equal(t, []string{"2"}, keys(b.tenantPending(t, src, "acme")))
		b.markTenant(t, src, "acme", old)

		// An update within the tenant, and a delete.
		b.exec(t, `UPDATE contacts SET name = 'a2' WHERE id = 1`)
		b.exec(t, `DELETE FROM contacts WHERE id = 150`)
		require.Equal(t, []string{"1"}, keys(b.tenantPending(t, src, "acme")))
		gone := b.tenantPending(t, src, "globex")
		require.Equal(t, []string{"150"}, keys(gone))
		require.True(t, gone[0].Deleted)
	})
}

func TestTenantsTakeTurns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL)`)
	_, srcs := b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 1\n    destination: crm\n    snapshot: false\n")
	src := srcs["contacts"]
	b.exec(t, `INSERT INTO contacts SELECT i, 't' || (i % 5) FROM generate_series(1, 50) i`)
	ctx := context.Background()

	got, err := sources.Tenants(ctx, b.pool, src, 0, "", nil, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"t0", "t1", "t2"}, got)
	got, err = sources.Tenants(ctx, b.pool, src, 0, "t2", nil, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"t3", "t4", "t0"}, got, "after the one served last, wrapping around")
	got, err = sources.Tenants(ctx, b.pool, src, 0, "t3", []string{"t0", "t4"}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"t1", "t2", "t3"}, got, "tenants not ready are left out; the last served comes last")
}

func TestTenantColumnMustBeNotNull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text)`)
	cfg := parse(t, "  - table: contacts\n    key: id\n    tenant: account\n    destination: crm\n")
	_, err := sources.Install(context.Background(), b.pool, cfg.SourceSpecs())
	require.ErrorContains(t, err, "tenant: column account of")
	require.ErrorContains(t, err, "must be NOT NULL")
	cfg = parse(t, "  - table: contacts\n    key: id\n    tenant: nope\n    destination: crm\n")
	_, err = sources.Install(context.Background(), b.pool, cfg.SourceSpecs())
	require.ErrorContains(t, err, "has no column nope")
}

// config check says what a change of tenant or lanes would do; migrate
// moves the pending changes to their new lanes.
func TestTenantPlanAndRelane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL)`)
	b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 2\n    destination: crm\n    snapshot: false\n")
	b.exec(t, `INSERT INTO contacts SELECT i, 't' || i FROM generate_series(1, 40) i`)
	ctx := context.Background()

	cfg := parse(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 8\n    destination: crm\n    snapshot: false\n")
	plan, err := sources.PlanInstall(ctx, b.pool, cfg.SourceSpecs())
	require.NoError(t, err)
	require.Len(t, plan.Changes, 1)
	require.Contains(t, plan.Changes[0].Detail, "lanes changed from 2 to 8")

	_, srcs := b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 8\n    destination: crm\n    snapshot: false\n")
	require.Equal(t, 8, srcs["contacts"].Lanes)
	rows, err := b.pool.Query(ctx, `SELECT DISTINCT tenant, lane FROM syncer_changes WHERE source = 'contacts'`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var tenant string
		var lane int
		require.NoError(t, rows.Scan(&tenant, &lane))
		require.Equal(t, sources.Lane(tenant, 8), lane, tenant)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 40, n)

	cfg = parse(t, "  - table: contacts\n    key: id\n    destination: crm\n    snapshot: false\n")
	plan, err = sources.PlanInstall(ctx, b.pool, cfg.SourceSpecs())
	require.NoError(t, err)
	require.Len(t, plan.Changes, 1)
	require.Contains(t, plan.Changes[0].Detail, "tenant changed")
}

// A key resent without a tenant (verify --heal) gets its row's tenant and
// lane; one whose row is gone is dropped.
func TestAdoptUntenanted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (account text NOT NULL, id bigint, PRIMARY KEY (account, id))`)
	_, srcs := b.install(t, "  - table: contacts\n    key: [account, id]\n    tenant: account\n    lanes: 4\n    destination: crm\n    snapshot: false\n")
	src := srcs["contacts"]
	b.exec(t, `INSERT INTO contacts VALUES ('acme', 1), ('globex', 2)`)
	b.markTenant(t, src, "acme", b.tenantPending(t, src, "acme"))
	b.markTenant(t, src, "globex", b.tenantPending(t, src, "globex"))
	_, err := sources.Resend(context.Background(), b.pool, src, sources.Scope{}, []string{`["acme",1]`, `["globex",2]`, `["gone",3]`})
	require.NoError(t, err)
	n, err := sources.AdoptUntenanted(context.Background(), b.pool, src)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, []string{`["acme",1]`}, keys(b.tenantPending(t, src, "acme")))
	require.Equal(t, []string{`["globex",2]`}, keys(b.tenantPending(t, src, "globex")))
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_changes WHERE tenant IS NULL`))
}

func (b *bundle) failTenant(t *testing.T, src *sources.Source, tenant string, rows []sources.Row, why string) {
	t.Helper()
	var ks, errs []string
	var vs []int64
	for _, r := range rows {
		ks, vs, errs = append(ks, r.Key), append(vs, r.Version), append(errs, why)
	}
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := sources.QueueMarks(batch, src, sources.Scope{Tenant: tenant}, nil, nil, ks, vs, errs); err != nil {
			return err
		}
		return tx.SendBatch(context.Background(), batch).Close()
	}))
}

// Migration 028: a failure is a (tenant, key)'s. A key that moved to
// another tenant and failed at both is failed at both, each retried to
// its own tenant; marking one tenant's synced leaves the other's failure.
func TestFailuresPerTenantAndKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, name text)`)
	_, srcs := b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 4\n    columns: [name]\n    destination: crm\n    snapshot: false\n")
	src := srcs["contacts"]
	b.exec(t, `INSERT INTO contacts VALUES (2, 'acme', 'b')`)
	b.failTenant(t, src, "acme", b.tenantPending(t, src, "acme"), "refused at acme")
	b.exec(t, `UPDATE contacts SET account = 'globex' WHERE id = 2`)
	b.failTenant(t, src, "acme", b.tenantPending(t, src, "acme"), "tombstone refused at acme")
	b.failTenant(t, src, "globex", b.tenantPending(t, src, "globex"), "refused at globex")

	failed, err := sources.RecentFailures(ctx, b.pool, "contacts", 10)
	require.NoError(t, err)
	byTenant := map[string]string{}
	for _, f := range failed {
		require.Equal(t, "2", f.Key)
		byTenant[f.Tenant] = f.Error
	}
	require.Equal(t, map[string]string{"acme": "tombstone refused at acme", "globex": "refused at globex"}, byTenant,
		"one failure per tenant, the later at acme replacing the earlier")
	stats, err := sources.Stats(ctx, b.pool)
	require.NoError(t, err)
	require.EqualValues(t, 2, stats[0].FailedKeys)

	n, err := sources.RetryFailed(ctx, b.pool, "contacts", sources.Scope{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	acme, globex := b.tenantPending(t, src, "acme"), b.tenantPending(t, src, "globex")
	require.Equal(t, []string{"2"}, keys(acme))
	require.Equal(t, []string{"2"}, keys(globex))
	require.True(t, acme[0].Deleted, "retried at acme: it is gone from acme")
	require.False(t, globex[0].Deleted)

	// Failed again at both; globex's accepted later clears globex's only.
	b.failTenant(t, src, "acme", acme, "again at acme")
	b.failTenant(t, src, "globex", globex, "again at globex")
	b.exec(t, `UPDATE contacts SET name = 'b2' WHERE id = 2`)
	b.markTenant(t, src, "globex", b.tenantPending(t, src, "globex"))
	failed, err = sources.RecentFailures(ctx, b.pool, "contacts", 10)
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, "acme", failed[0].Tenant)
	n, err = sources.RetryFailedKeys(ctx, b.pool, "contacts", []string{"2"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, []string{"2"}, keys(b.tenantPending(t, src, "acme")))
}

// lookUps counts the statements a pool runs.
type lookUps struct{ n atomic.Int64 }

func (l *lookUps) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	l.n.Add(1)
	return ctx
}

func (l *lookUps) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Issue 54: a look-up of a lane's tenants that wraps around (fewer
// tenants after the one served last than it asks for: lanes of 8 to 15
// tenants looking 16 up, at nearly every turn) ran two statements, each
// waiting for one of the pool's connections; it is one now, with the same
// answers.
func TestTenantsWrapAroundInOneStatement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL)`)
	_, srcs := b.install(t, "  - table: contacts\n    key: id\n    tenant: account\n    lanes: 1\n    destination: crm\n    snapshot: false\n")
	src := srcs["contacts"]
	b.exec(t, `INSERT INTO contacts SELECT i, 't' || (i % 5) FROM generate_series(1, 50) i`)
	ctx := context.Background()
	cfg := b.pool.Config().Copy()
	looks := &lookUps{}
	cfg.ConnConfig.Tracer = looks
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for _, c := range []struct {
		after string
		skip  []string
		n     int
		want  []string
	}{
		{"t2", nil, 3, []string{"t3", "t4", "t0"}},
		{"t2", nil, 2, []string{"t3", "t4"}},
		{"t3", []string{"t0", "t4"}, 10, []string{"t1", "t2", "t3"}},
		{"t4", nil, 10, []string{"t0", "t1", "t2", "t3", "t4"}},
		{"t1", nil, 10, []string{"t2", "t3", "t4", "t0", "t1"}},
		{"zz", nil, 2, []string{"t0", "t1"}},
		{"t0", []string{"t0", "t1", "t2", "t3", "t4"}, 10, []string{}},
		{"", nil, 2, []string{"t0", "t1"}},
	} {
		before := looks.n.Load()
		got, err := sources.Tenants(ctx, pool, src, 0, c.after, c.skip, c.n)
		require.NoError(t, err)
		if len(got) == 0 {
			got = []string{}
		}
		require.Equal(t, c.want, got, "after %q, skip %v, %d", c.after, c.skip, c.n)
		require.Equal(t, int64(1), looks.n.Load()-before, "one statement, after %q, skip %v, %d", c.after, c.skip, c.n)
	}
}
