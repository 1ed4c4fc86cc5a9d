// Package rowstest is the suite every kind of source's Rows passes
// (internal/rows), as River's riverdrivertest is its drivers': one
// function, Run, given a constructor of the kind's rows on a fresh
// schema, checks what the seam promises, whatever the kind. A new kind of
// source is done when it passes.
package rowstest

import (
	"cmp"
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/verify"
)

// Fixture is one kind's rows on a schema of their own.
type Fixture struct {
	Pool *pgxpool.Pool
	// Rows are the rows under test, opened with rows.Open.
	Rows rows.Rows
	// Write writes n new rows of the scope (pending, as an application's
	// write makes them) and returns their keys in key order, in their
	// text form.
	Write func(t *testing.T, n int) []string
	// BadKey is a text that cannot be a key of the source.
	BadKey string
}

// Run runs the suite; open returns a fixture on a fresh schema for each
// test.
func Run(t *testing.T, open func(t *testing.T) Fixture) {
	t.Helper()
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, fx Fixture)
	}{
		{"PendingInKeyOrderByPages", pendingInOrder},
		{"MarkedAreNotPending", markedNotPending},
		{"FailedWaitForRetry", failedWaitForRetry},
		{"RetryOfKeysNamed", retryOfKeysNamed},
		{"CountsByState", countsByState},
		{"TenantsOfTheSource", tenantsOfTheSource},
		{"ParseKey", parseKey},
		{"ReplayAndVerifyOfTheScope", replayAndVerify},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, open(t))
		})
	}
}

func pending(t *testing.T, fx Fixture) []rows.Item {
	t.Helper()
	var out []rows.Item
	after := ""
	for {
		page, err := fx.Rows.Pending(context.Background(), fx.Pool, after, 2)
		require.NoError(t, err)
		if len(page) == 0 {
			return out
		}
		require.LessOrEqual(t, len(page), 2, "a page holds at most limit items")
		out = append(out, page...)
		after = page[len(page)-1].Key
	}
}

func keysOf(items []rows.Item) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.Key)
	}
	return out
}

func pendingInOrder(t *testing.T, fx Fixture) {
	ctx := context.Background()
	any, err := fx.Rows.AnyPending(ctx, fx.Pool)
	require.NoError(t, err)
	require.False(t, any, "nothing written, nothing pending")
	keys := fx.Write(t, 5)
	items := pending(t, fx)
	require.Equal(t, keys, keysOf(items))
	for _, it := range items {
		require.False(t, it.Deleted)
		require.Positive(t, it.Version)
	}
	any, err = fx.Rows.AnyPending(ctx, fx.Pool)
	require.NoError(t, err)
	require.True(t, any)
}

func markedNotPending(t *testing.T, fx Fixture) {
	ctx := context.Background()
	keys := fx.Write(t, 3)
	items := pending(t, fx)
	require.NoError(t, fx.Rows.Mark(ctx, fx.Pool, items[:2]))
	require.Equal(t, keys[2:], keysOf(pending(t, fx)))
	require.NoError(t, fx.Rows.Mark(ctx, fx.Pool, items[2:]))
	require.Empty(t, pending(t, fx))
	any, err := fx.Rows.AnyPending(ctx, fx.Pool)
	require.NoError(t, err)
	require.False(t, any, "every row marked")
	n, err := fx.Rows.Retry(ctx, fx.Pool, nil)
	require.NoError(t, err)
	require.Zero(t, n, "nothing failed, nothing retried")
}

func failedWaitForRetry(t *testing.T, fx Fixture) {
	ctx := context.Background()
	keys := fx.Write(t, 3)
	items := pending(t, fx)
	require.NoError(t, fx.Rows.Fail(ctx, fx.Pool, items[:2], []string{"no", "never"}))
	require.Equal(t, keys[2:], keysOf(pending(t, fx)), "a failed key waits")
	n, err := fx.Rows.Retry(ctx, fx.Pool, nil)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	again := pending(t, fx)
	require.Equal(t, keys, keysOf(again), "every failed key is pending again")
}

func retryOfKeysNamed(t *testing.T, fx Fixture) {
	ctx := context.Background()
	keys := fx.Write(t, 3)
	items := pending(t, fx)
	require.NoError(t, fx.Rows.Fail(ctx, fx.Pool, items, []string{"a", "b", "c"}))
	if fx.Rows.Scope().Tenant != "" {
		_, err := fx.Rows.Retry(ctx, fx.Pool, keys[:1])
		require.Error(t, err, "a tenant's retry takes all its failed keys")
		return
	}
	n, err := fx.Rows.Retry(ctx, fx.Pool, keys[1:2])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, keys[1:2], keysOf(pending(t, fx)), "only the key named")
	n, err = fx.Rows.Retry(ctx, fx.Pool, keys[1:2])
	require.NoError(t, err)
	require.Zero(t, n, "no longer failed")
}

func countsByState(t *testing.T, fx Fixture) {
	ctx := context.Background()
	sc := fx.Rows.Scope()
	fx.Write(t, 3)
	items := pending(t, fx)
	require.NoError(t, fx.Rows.Mark(ctx, fx.Pool, items[:1]))
	require.NoError(t, fx.Rows.Fail(ctx, fx.Pool, items[1:2], []string{"no"}))
	c, err := fx.Rows.Counts(ctx, fx.Pool)
	require.NoError(t, err)
	require.Equal(t, sc.Source, c.Source)
	require.Equal(t, fx.Rows.Kind(), c.Kind)
	require.NotEmpty(t, c.Destination)
	require.EqualValues(t, 1, c.Pending, "the key neither marked nor failed")
	require.EqualValues(t, 1, c.Failed)
	require.GreaterOrEqual(t, c.Total, c.Pending+c.Failed)
	require.Positive(t, c.OldestPending, "a row is pending")
	if sc.Tenant != "" {
		return
	}
	// Every source's counts at once say the same of the source, exact or
	// read as the gauges read them.
	for _, exact := range []bool{true, false} {
		all, err := rows.AllCounts(ctx, fx.Pool, exact)
		require.NoError(t, err)
		var got []rows.Counts
		for _, a := range all {
			if a.Source == sc.Source {
				got = append(got, a)
			}
		}
		require.Len(t, got, 1, "exact %v", exact)
		require.Equal(t, c.Kind, got[0].Kind)
		require.Equal(t, c.Destination, got[0].Destination)
		require.Equal(t, [2]int64{c.Pending, c.Failed}, [2]int64{got[0].Pending, got[0].Failed}, "exact %v", exact)
	}
}

func tenantsOfTheSource(t *testing.T, fx Fixture) {
	ctx := context.Background()
	sc := fx.Rows.Scope()
	keys := fx.Write(t, 2)
	all, err := fx.Rows.Tenants(ctx, fx.Pool, "", 100)
	require.NoError(t, err)
	if !fx.Rows.Tenanted() {
		require.Empty(t, all, "no tenant column, no tenants")
		_, err := fx.Rows.OfTenant("acme")
		require.ErrorIs(t, err, rows.ErrUnknown)
		return
	}
	require.NotEmpty(t, all, "the rows written are a tenant's")
	page, err := fx.Rows.Tenants(ctx, fx.Pool, "", 1)
	require.NoError(t, err)
	require.Equal(t, all[:1], page, "a page holds at most n tenants, from the first")
	if sc.Tenant != "" {
		require.Contains(t, all, sc.Tenant)
	}
	// The scope's own tenant: the fixture writes its rows (another
	// tenant's rows may stand beside them).
	mine := cmp.Or(sc.Tenant, all[0])
	one, err := fx.Rows.OfTenant(mine)
	require.NoError(t, err)
	require.Equal(t, rows.Scope{Source: sc.Source, Tenant: mine}, one.Scope())
	require.Equal(t, fx.Rows.Destination(), one.Destination())
	for _, it := range pending(t, Fixture{Pool: fx.Pool, Rows: one}) {
		require.Contains(t, keys, it.Key, "a tenant's scope reads its own rows only")
	}
}

func parseKey(t *testing.T, fx Fixture) {
	keys := fx.Write(t, 1)
	k, err := fx.Rows.ParseKey(" " + keys[0] + " ")
	require.NoError(t, err)
	require.Equal(t, keys[0], k, "a key typed with blanks is the key recorded")
	_, err = fx.Rows.ParseKey(fx.BadKey)
	require.ErrorIs(t, err, sources.ErrBadKey)
	require.NotEmpty(t, fx.Rows.KeyType())
}

func replayAndVerify(t *testing.T, fx Fixture) {
	ctx := context.Background()
	keys := fx.Write(t, 3)
	sc := fx.Rows.Scope()
	require.Equal(t, rows.KindOf(sc.Source), fx.Rows.Kind(), "the kind is the name's")
	require.Equal(t, rows.HeldFeedOf(sc.Source), fx.Rows.HeldFeed())

	table := fx.Rows.ReplayTable()
	require.Equal(t, sc.Source, table.Name())
	n, err := table.CountReplay(ctx, fx.Pool, &replays.Request{Source: sc.Source, Range: replays.SourceRange{FromKey: keys[1], ToKey: keys[2], Tenant: sc.Tenant}})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	v, err := fx.Rows.Verify(verify.Range{FromKey: keys[1]})
	require.NoError(t, err)
	require.Equal(t, sc.Source, v.Name())
	page, err := v.Page(ctx, fx.Pool, "", 10)
	require.NoError(t, err)
	var got []string
	for _, h := range page {
		got = append(got, h.ID)
	}
	require.Equal(t, keys[1:], got, "verify reads the scope's rows of the range")

	_, err = fx.Rows.Verify(verify.Range{FromKey: keys[2], ToKey: keys[1]})
	require.Error(t, err, "a range backwards")
	_, err = rows.Open(ctx, fx.Pool, rows.Scope{Source: "no_such_source"})
	var none *rows.NoSourceError
	require.True(t, errors.As(err, &none), "%v", err)
}
