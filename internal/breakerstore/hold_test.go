package breakerstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// The presence's beat reads every destination's hold in one statement:
// each as ReadHold reads it alone, in the order asked, a destination never
// paused as the zero hold.
func TestReadHoldsReadsEachAsReadHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	set := func(ns string, h breakerstore.Hold) {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: ns})
		require.NoError(t, err)
		_, err = s.SetHold(ctx, h)
		require.NoError(t, err)
	}
	crm, erp, never := breakerstore.DestinationNamespace("crm"), breakerstore.DestinationNamespace("erp"), breakerstore.DestinationNamespace("never")
	set(crm, breakerstore.Hold{Paused: true, By: "console"})
	set(erp, breakerstore.Hold{Paused: true, By: "command line"})
	set(erp, breakerstore.Hold{Paused: false, By: "console"})
	set("", breakerstore.Hold{Paused: true, By: "command line"})

	namespaces := []string{erp, never, crm, ""}
	got, err := breakerstore.ReadHolds(ctx, b.pool, namespaces)
	require.NoError(t, err)
	require.Len(t, got, len(namespaces))
	for i, ns := range namespaces {
		one, err := breakerstore.ReadHold(ctx, b.pool, ns)
		require.NoError(t, err)
		require.Equal(t, one, got[i], "namespace %q", ns)
	}
	require.True(t, got[2].Paused)
	require.False(t, got[0].Paused)
	require.NotZero(t, got[0].Generation)
	require.Zero(t, got[1])
	require.True(t, got[3].Paused, "the default destination's namespace")
}
