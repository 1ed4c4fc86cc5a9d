package verify_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/verify"
)

// TestPeriodicTenantsRunEndsWithinItsPeriod: a periodic run of a source
// whose destination has tenants pages each tenant apart, so many small
// tenants make a lookup each, far more than the source's rows over a
// page. The run is spread over the tenants' pages: it ends within its
// period, and spread over about half of it. Estimated as rows/500+1 (one
// page for 30 rows), it waited half the period between lookups: 30
// tenants at a 6 s period took about 90 s (25 days for 10k tenants at
// 24h).
func TestPeriodicTenantsRunEndsWithinItsPeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewMigrated(t)
	locker, err := locks.New(db.Pool.Config().ConnConfig, nil)
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	const n = 30
	const every = 6 * time.Second
	rd := &countingReader{}
	src := spreadSource{name: "orders", rows: n}
	bg, err := verify.NewBackground(db.Pool, locker, &verify.BackgroundConfig{Schema: db.Name, Tick: 50 * time.Millisecond, Jobs: func(context.Context) ([]verify.Job, error) {
		return []verify.Job{{Source: src, Tenants: manyTenants{n: n, rd: rd}, Every: every}}, nil
	}})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); bg.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	var l *verify.Last
	require.Eventually(t, func() bool {
		runs, err := verify.LastRuns(ctx, db.Pool)
		require.NoError(t, err)
		l = runs["orders"]
		return l != nil && l.State == verify.StateFinished
	}, every, 20*time.Millisecond, "the periodic run ends within its period")
	require.Equal(t, int64(n), rd.lookups.Load(), "a lookup a tenant")
	took := l.FinishedAt.Sub(*l.StartedAt)
	require.Greater(t, took, every/4, "spread over about half the period, not a burst")
	require.Less(t, took, every)
}

// manyTenants are n tenants of a key each, read by rd; they tell their
// pages as the sources package counts them (a page a tenant).
type manyTenants struct {
	n  int
	rd verify.Reader
}

func (m manyTenants) Page(_ context.Context, _ database.Querier, after tenant.Tenant, limit int) ([]tenant.Tenant, error) {
	var out []tenant.Tenant
	for i := range m.n {
		t := tenant.Tenant(fmt.Sprintf("t%04d", i))
		if t > after && len(out) < limit {
			out = append(out, t)
		}
	}
	return out, nil
}

func (m manyTenants) Tenant(_ context.Context, t tenant.Tenant) (verify.Source, verify.Reader, error) {
	return spreadSource{name: "orders", tenant: t}, m.rd, nil
}

func (m manyTenants) Pages(context.Context, database.Querier, int) (int64, error) {
	return int64(m.n), nil
}
