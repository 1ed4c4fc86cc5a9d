package exporter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/sources"
)

// nowhere is a Destination the family never calls.
type nowhere struct{}

func (nowhere) Deliver(context.Context, delivery.Batch) (*delivery.Outcome, error) { return nil, nil }
func (nowhere) MaxInFlight() int                                                   { return 1 }

// A source's kind is its constructor's: the family builds what the
// constructor chose, and refuses a Source no constructor built.
func TestKindDecidedByTheConstructor(t *testing.T) {
	t.Parallel()
	e := &Exporter{}
	res := Resources(nowhere{})
	orders := Configured(&sources.Source{Name: "orders", Destination: "crm"}, nowhere{})
	orders.BatchSize = 7
	require.Equal(t, jobs.Resources, res.Name())
	require.Equal(t, "orders", orders.Name())

	fam, err := e.family([]Source{res, orders})
	require.NoError(t, err)
	require.IsType(t, &resourcesSource{}, fam[jobs.Resources])
	require.IsType(t, &configuredSource{}, fam["orders"])
	require.Equal(t, metrics.DefaultDestination, fam[jobs.Resources].base().DestinationName)
	require.Equal(t, "crm", fam["orders"].base().DestinationName, "a configured source goes to its own destination")
	require.Equal(t, 7, fam["orders"].base().BatchSize)
	require.Equal(t, "orders", fam["orders"].live().source)
	require.Equal(t, jobs.Resources, fam[jobs.Resources].live().source, "resources' items are counted by source too")

	_, err = e.family([]Source{{Destination: nowhere{}}})
	require.ErrorContains(t, err, "Sources[0]: build it with Resources or Configured")
	_, err = e.family([]Source{res, Resources(nowhere{})})
	require.ErrorContains(t, err, "Sources[1]: source resources is listed twice")
	noDest := Resources(nil)
	_, err = e.family([]Source{noDest})
	require.ErrorContains(t, err, "Destination is required")

	moved := Configured(&sources.Source{Name: "orders", Destination: "billing"}, nowhere{})
	require.False(t, sameSource(&orders, &moved), "a source whose settings changed is not the same")
	same := Configured(&sources.Source{Name: "orders", Destination: "crm"}, orders.Destination)
	same.BatchSize = 7
	require.True(t, sameSource(&orders, &same))
}
