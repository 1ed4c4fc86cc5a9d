package cli

import (
	"errors"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	noEnv := func(string) (string, bool) { return "", false }
	for _, tt := range []struct {
		name   string
		env    func(string) (string, bool)
		cgroup memlimit.Provider
		limit  int64
		source string
		err    bool
	}{
		{"GOMEMLIMIT wins", func(k string) (string, bool) { return "64MiB", k == "GOMEMLIMIT" }, memlimit.Limit(1 << 30), 0, "GOMEMLIMIT=64MiB", false},
		{"container limit", noEnv, memlimit.Limit(1000), 900, "container", false},
		{"no limit anywhere", noEnv, func() (uint64, error) { return 0, memlimit.ErrNoLimit }, 0, "none", false},
		{"no cgroup", noEnv, func() (uint64, error) { return 0, errors.New("no cgroup mounted") }, 0, "none", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			limit, source, err := memoryLimit(tt.env, tt.cgroup)
			require.Equal(t, tt.limit, limit)
			require.Equal(t, tt.source, source)
			require.Equal(t, tt.err, err != nil)
		})
	}
}

func TestHeapSampling(t *testing.T) {
	t.Parallel()
	env := func(godebug string) func(string) (string, bool) {
		return func(k string) (string, bool) { return godebug, k == "GODEBUG" && godebug != "" }
	}
	require.False(t, heapSampling(false, env("")), "off by default")
	require.True(t, heapSampling(true, env("")), "on with --pprof")
	require.True(t, heapSampling(false, env("gctrace=1,memprofilerate=4096")), "GODEBUG decides")
	require.False(t, heapSampling(false, env("gctrace=1")))
}

func TestGCPercent(t *testing.T) {
	t.Parallel()
	pct, source := gcPercent(func(string) (string, bool) { return "", false })
	require.Equal(t, gcPercentDefault, pct)
	require.Equal(t, "default", source)
	pct, source = gcPercent(func(k string) (string, bool) { return "200", k == "GOGC" })
	require.Zero(t, pct, "the runtime applied GOGC already")
	require.Equal(t, "GOGC=200", source)
}
