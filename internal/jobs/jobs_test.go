package jobs_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/migrations"
)

// An op and a job read back into the source they are for, whatever its
// kind: one reading, which the relay, the commands and the triggers share.
func TestSourceOfOpAndJob(t *testing.T) {
	t.Parallel()
	for _, src := range []string{jobs.Resources, "orders", "public.orders"} {
		require.Equal(t, src, jobs.SourceOfOp(jobs.WakeOp(src)), "a wake-up's op names its source")
	}
	require.Equal(t, "orders", jobs.SourceOfOp(migrations.SourceOp("orders")), "a capture trigger's op")
	for _, op := range []string{"INSERT", "UPDATE", "DELETE", "TRUNCATE", "RETRY", ""} {
		require.Equal(t, jobs.Resources, jobs.SourceOfOp(op), "resources' triggers write %q", op)
	}

	args, err := json.Marshal(jobs.ExportArgs{Source: "orders"})
	require.NoError(t, err)
	for _, tt := range []struct {
		kind string
		args []byte
		want string
		ok   bool
	}{
		{jobs.ExportArgs{}.Kind(), args, "orders", true},
		{jobs.ExportArgs{}.Kind(), []byte(`{"source":"resources"}`), jobs.Resources, true},
		{jobs.PreviousSyncArgs{}.Kind(), []byte(`{}`), jobs.Resources, true},
		{jobs.PreviousReplayArgs{}.Kind(), []byte(`{"replay_id":3}`), jobs.Resources, true},
		{jobs.ExportArgs{}.Kind(), []byte(`not json`), "", false},
		{jobs.ExportArgs{}.Kind(), []byte(`{}`), "", false},
		{"someone_elses", args, "", false},
	} {
		got, ok := jobs.SourceOfJob(tt.kind, tt.args)
		require.Equal(t, tt.ok, ok, "%s %s", tt.kind, tt.args)
		require.Equal(t, tt.want, got, "%s %s", tt.kind, tt.args)
	}
}

// A lane's name reads back into its source and lane; no other name does.
func TestLaneNames(t *testing.T) {
	t.Parallel()
	src, lane, ok := jobs.LaneOf(jobs.LaneName("app.contacts", 12))
	require.True(t, ok)
	require.Equal(t, "app.contacts", src)
	require.Equal(t, 12, lane)
	for _, name := range []string{"orders", jobs.Resources, "@3", "a@", "a@x", "a@-1", "a@03"} {
		_, _, ok := jobs.LaneOf(name)
		require.False(t, ok, name)
	}
}
