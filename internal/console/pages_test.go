package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/status"
)

// Resources' row is built from its entry of the report as any source's:
// its own counts, its destination, no snapshot; nothing taken out of the
// totals.
func TestEverySourceRowBuiltAlike(t *testing.T) {
	t.Parallel()
	res := sourceRowOf(status.Source{Name: status.ResourcesSource, Table: "resources", Destination: status.DefaultDestination,
		Total: 10, Synced: 6, Pending: 3, Failed: 1, OldestPendingAgeSeconds: 61, SnapshotPercent: -1,
		Stopped: "destination default: circuit breaker open until 2026-01-01T00:00:00Z"})
	require.Equal(t, sourceRow{Name: "resources", Table: "resources", Destination: "default", Pending: 3, Failed: 1,
		Oldest: "1m1s", Snapshot: "—", Stopped: "destination default: circuit breaker open until 2026-01-01T00:00:00Z", Verified: "never"}, res)

	orders := sourceRowOf(status.Source{Name: "orders", Table: "public.orders", Destination: "crm", Pending: 5,
		Snapshot: "running", SnapshotPercent: 12.5})
	require.Equal(t, "running (12.5%)", orders.Snapshot)
	require.Equal(t, int64(5), orders.Pending)
}
