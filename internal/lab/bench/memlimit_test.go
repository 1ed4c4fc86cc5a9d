package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	got := mergeEnv([]string{"A=1", "GOMEMLIMIT=5MiB", "B=2"}, []string{"GOMEMLIMIT", "C=3", "B=4"})
	require.Equal(t, []string{"A=1", "C=3", "B=4"}, got)
}

func TestOldMemoryLimit(t *testing.T) {
	t.Parallel()
	r := &runner{sizes: Sizes{BatchSize: 500}}
	require.Equal(t, int64(16<<20), r.oldMemoryLimit())
	r.sizes.BatchSize = 2000
	require.Equal(t, int64(10*2000*2048), r.oldMemoryLimit())
}
