package breakerstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// Many namespaces' facts in one statement, each as ReadStateOf reads it
// alone; a namespace without facts reads as the zero State.
func TestReadStatesOfManyNamespaces(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	nss := []string{breakerstore.TenantNamespace("crm", "a"), breakerstore.TenantNamespace("crm", "b:pause"), breakerstore.TenantNamespace("crm", "none"), ""}
	for i, ns := range nss[:2] {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: ns})
		require.NoError(t, err)
		require.NoError(t, s.SetRate(ctx, breakerstore.Rate{Limit: float64(i + 3)}))
		require.NoError(t, s.SetPause(ctx, breakerstore.Pause{Until: time.Now().Add(time.Minute).UTC().Truncate(time.Second), Cause: "429"}))
	}
	_, err := b.store.SetHold(ctx, breakerstore.Hold{Paused: true, By: "console"})
	require.NoError(t, err)
	all, err := breakerstore.ReadStatesOf(ctx, b.pool, nss)
	require.NoError(t, err)
	require.Len(t, all, len(nss))
	for _, ns := range nss {
		one, err := breakerstore.ReadStateOf(ctx, b.pool, ns)
		require.NoError(t, err)
		require.Equal(t, one, all[ns], "namespace %q", ns)
	}
	require.InDelta(t, 4.0, all[nss[1]].Rate.Limit, 0)
	require.Equal(t, breakerstore.State{}, all[nss[2]])
	require.True(t, all[""].Hold.Paused)
}

// Shareds of one Together: each namespace's first Load reads it alone,
// then one statement every half period keeps them all fresh; a Shared's
// own writes show at once over a read begun before them; another
// process's write shows within the period; Close ends the reads.
func TestTogetherKeepsManyNamespacesFresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const period = 400 * time.Millisecond
	tg := breakerstore.NewTogether(b.pool, period)
	const n = 20
	shared := make([]*breakerstore.Shared, n)
	others := make([]*breakerstore.Store, n)
	for i := range shared {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", tenant.Tenant(fmt.Sprint("t", i)))})
		require.NoError(t, err)
		shared[i], others[i] = tg.Shared(s), s
		_, err = shared[i].Load(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int64(n), tg.Reads(), "each namespace's first Load reads it alone")

	loadAll := func() []breakerstore.State {
		out := make([]breakerstore.State, n)
		for i, s := range shared {
			st, err := s.Load(ctx)
			require.NoError(t, err)
			out[i] = st
		}
		return out
	}
	// Another process's pause of t3 is seen within the period (and a
	// read), while every namespace is asked for every 50 ms.
	pause := breakerstore.Pause{Until: time.Now().Add(time.Minute).UTC(), Cause: "429 Retry-After: 60", Status: 429}
	require.NoError(t, others[3].SetPause(ctx, pause))
	written := time.Now()
	for !loadAll()[3].Pause.Active(time.Now()) {
		require.Less(t, time.Since(written), 2*period, "another process's pause not seen")
		time.Sleep(50 * time.Millisecond)
	}
	reads, from := tg.Reads(), time.Now()
	for range 20 {
		loadAll()
		time.Sleep(50 * time.Millisecond)
	}
	// A statement every half period (and the read's time), where each
	// Shared of its own read once a period: 20 a period.
	most := int64(time.Since(from)/(period/2)) + 2
	require.LessOrEqual(t, tg.Reads()-reads, most, "20 namespaces asked for every 50 ms")

	// Its own writes show at once, over what was read before them.
	open := breakerstore.Breaker{State: gobreaker.StateOpen, Generation: 2, Expiry: time.Now().Add(time.Minute).UTC()}
	require.NoError(t, shared[5].SetBreaker(ctx, open))
	require.NoError(t, shared[5].SetRate(ctx, breakerstore.Rate{Limit: 7}))
	changed, err := shared[5].SetRefusal(ctx, breakerstore.KeyCredentials, breakerstore.Refusal{Refused: true, Status: 401, Message: "refused"})
	require.NoError(t, err)
	require.True(t, changed)
	st, err := shared[5].Load(ctx)
	require.NoError(t, err)
	require.Equal(t, gobreaker.StateOpen, st.Breaker.State)
	require.InDelta(t, 7, st.Rate.Limit, 0)
	require.True(t, st.Credentials.Refused)
	require.False(t, st.Credentials.Since.IsZero())
	time.Sleep(period)
	st, err = shared[5].Load(ctx)
	require.NoError(t, err)
	require.Equal(t, gobreaker.StateOpen, st.Breaker.State, "and after the next read, from the database")
	require.True(t, st.Credentials.Refused)
	require.True(t, loadAll()[3].Pause.Active(time.Now()), "the neighbour's facts still there")

	tg.Close()
	reads = tg.Reads()
	time.Sleep(period)
	require.Equal(t, reads, tg.Reads(), "no read after Close")
	st, err = shared[3].Load(ctx)
	require.NoError(t, err, "a Load after Close reads alone")
	require.True(t, st.Pause.Active(time.Now()))
}
