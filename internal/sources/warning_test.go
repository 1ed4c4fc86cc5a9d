package sources

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A snapshot that no daemon starts is said once it has waited
// SnapshotWaitLimit, beside the partitions' warning; nothing before.
func TestWarningSaysASnapshotNoDaemonStarted(t *testing.T) {
	require.Empty(t, Stat{SnapshotWaiting: SnapshotWaitLimit - time.Second}.Warning())
	w := Stat{SnapshotWaiting: 3 * time.Minute, Uncaptured: []string{"public.p2"}}.Warning()
	require.True(t, strings.HasPrefix(w, "no daemon has started its snapshot in the 3m0s"), w)
	require.Contains(t, w, "syncer_source_unconfigured")
	require.Contains(t, w, "; partitions public.p2 were attached")
}
