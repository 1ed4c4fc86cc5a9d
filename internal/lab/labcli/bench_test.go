package labcli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/lab/bench"
)

// TestBenchNeverReadsDatabaseURL: `syncer-lab bench` loads a database for
// minutes, so in a production container, where DATABASE_URL names the
// production database, it must keep to its own setting. Not parallel: it
// sets the process's environment, which kong reads.
func TestBenchNeverReadsDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://prod.example.com:5432/prod")
	parse := func(args ...string) *Lab {
		t.Helper()
		var root Lab
		var out bytes.Buffer
		p, err := cli.NewParser(program(), &root, &out, &out)
		require.NoError(t, err)
		_, err = p.Parse(args)
		require.NoError(t, err)
		return &root
	}

	t.Run("default", func(t *testing.T) {
		require.Equal(t, bench.DatabaseURLDefault, parse("bench").Bench.DatabaseURL)
	})
	t.Run("flag", func(t *testing.T) {
		require.Equal(t, "postgres://127.0.0.1:5432/scratch",
			parse("bench", "--bench-database-url", "postgres://127.0.0.1:5432/scratch").Bench.DatabaseURL)
	})
	t.Run("variable", func(t *testing.T) {
		t.Setenv("SYNCER_BENCH_DATABASE_URL", "postgres://127.0.0.1:5432/scratch2")
		require.Equal(t, "postgres://127.0.0.1:5432/scratch2", parse("bench").Bench.DatabaseURL)
	})
	t.Run("help says so", func(t *testing.T) {
		var out bytes.Buffer
		code := Main(t.Context(), []string{"bench", "--help"}, &out, &out)
		require.Equal(t, 0, code)
		help := out.String()
		require.Contains(t, help, "--bench-database-url")
		require.Contains(t, help, "SYNCER_BENCH_DATABASE_URL")
		require.Contains(t, help, "DATABASE_URL is never read")
		require.NotContains(t, help, "--database-url")
	})
}
