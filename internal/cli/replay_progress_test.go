package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/replays"
)

// Issue 54 point 11: `replay --tenant initech --wait` printed "done, 0 of
// 40 keys sent (40 queued)" at each poll while the daemons sent the keys
// it had queued. A replay of a source's keys says "sending" until its
// last key is sent, and "done" only with its end line.
func TestProgressStateOfAQueuedReplay(t *testing.T) {
	queued := replays.Progress{Replay: replays.Replay{ID: 1, Source: "contacts", State: replays.StateDone}, Queued: 40}
	end, _ := endLine(queued)
	require.Empty(t, end)
	require.Equal(t, "sending", progressState(queued, end))

	queued.Sent, queued.Over = 40, true
	end, _ = endLine(queued)
	require.NotEmpty(t, end)
	require.Equal(t, "done", progressState(queued, end))

	running := replays.Progress{Replay: replays.Replay{ID: 2, State: replays.StateRunning}}
	require.Equal(t, "running", progressState(running, ""))
}
