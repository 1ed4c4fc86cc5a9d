package tenants

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/migrations"
)

// The tenants' deliverers read their shared facts through one reader
// (issue 54): 100 asking at once get each its own facts, in a few
// queries rather than 100; one alone is read at once.
func TestTenantsFactsReadTogether(t *testing.T) {
	t.Parallel()
	dsn, _ := dbtest.NewSchema(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.Up(t.Context(), pool, nil)
	require.NoError(t, err)
	const n = 100
	nss := make([]string, n)
	for i := range n {
		nss[i] = breakerstore.TenantNamespace("crm", fmt.Sprint("t", i))
		if i%3 == 0 {
			continue // no facts
		}
		s, err := breakerstore.New(pool, &breakerstore.Config{Namespace: nss[i]})
		require.NoError(t, err)
		require.NoError(t, s.SetRate(t.Context(), breakerstore.Rate{Limit: float64(i)}))
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fr := &factsReader{pool: pool, ctx: ctx}

	st, err := fr.load(t.Context(), nss[1])
	require.NoError(t, err)
	require.Equal(t, 1.0, st.Rate.Limit)
	fr.mu.Lock()
	require.Equal(t, 1, fr.rounds)
	fr.mu.Unlock()

	var wg sync.WaitGroup
	got := make([]breakerstore.State, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = fr.load(t.Context(), nss[i]) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		want := 0.0
		if i%3 != 0 {
			want = float64(i)
		}
		require.Equal(t, want, got[i].Rate.Limit, "tenant %d", i)
	}
	fr.mu.Lock()
	rounds := fr.rounds - 1
	fr.mu.Unlock()
	require.Less(t, rounds, n/4, "100 tenants' facts in %d queries", rounds)
	t.Logf("100 tenants' facts in %d queries", rounds)
}
