package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/status"
)

// A lock held by a lease alone (no session: PID 0) is said so, never as
// "backend pid 0".
func TestLockLineOfALeaseAlone(t *testing.T) {
	require.Equal(t, "held by syncer-run on web1, process 42 (lease)",
		lockLine(status.Lock{Held: true, Role: "syncer-run", Host: "web1", Process: 42}))
	require.Equal(t, `held by lease (application_name "x")`, lockLine(status.Lock{Held: true, ApplicationName: "x"}))
	require.Equal(t, "held by syncer-run on web1, process 42 (backend pid 7)",
		lockLine(status.Lock{Held: true, PID: 7, Role: "syncer-run", Host: "web1", Process: 42}))
}
