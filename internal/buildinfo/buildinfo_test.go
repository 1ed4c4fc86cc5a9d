package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	vcs := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tt := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"stamped wins", "v1.2.3", "deadbeef", vcs, Info{"v1.2.3", "deadbeef", "go1.99.1"}},
		{"vcs fallback, dirty", "", "", vcs, Info{"devel", "abc123-dirty", "go1.99.1"}},
		{"module version", "", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v0.4.0"}}, Info{"v0.4.0", Unknown, "go1.99.1"}},
		{"nothing recorded", "", "", nil, Info{Version: "devel", Commit: Unknown}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := resolve(tt.version, tt.commit, tt.bi)
			if tt.want.GoVersion == "" {
				require.NotEmpty(t, got.GoVersion)
				got.GoVersion = ""
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestGetNeverEmpty(t *testing.T) {
	t.Parallel()
	info := Get()
	require.NotEmpty(t, info.Version)
	require.NotEmpty(t, info.Commit)
	require.NotEmpty(t, info.GoVersion)
}
