package bench_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/bench"
)

// TestTinyRunHasEveryRow runs every scenario at SizeTiny against the real
// binary and checks that the table has every row and no scenario errored.
// It asserts no timing: tiny figures say nothing about speed.
func TestTinyRunHasEveryRow(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs every scenario; skipped with -short")
	}
	dir := t.TempDir()
	bin, lab := filepath.Join(dir, "syncer"), filepath.Join(dir, "syncer-lab")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/syncer-dev/syncer/cmd/syncer").CombinedOutput()
	require.NoError(t, err, "build syncer: %s", out)
	out, err = exec.Command("go", "build", "-o", lab, "github.com/syncer-dev/syncer/cmd/syncer-lab").CombinedOutput()
	require.NoError(t, err, "build syncer-lab: %s", out)

	// Every scenario at SizeTiny took 5 minutes on a loaded two-core
	// machine before dbshare's scratch cluster and twelve phases (about
	// 20 s) came last.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, &bench.Config{DatabaseURL: dbtest.URL(), Size: bench.SizeTiny, Binary: bin, Lab: lab})
	require.NoError(t, err)

	var names []string
	for _, row := range rep.Rows {
		require.Empty(t, row.Error, "scenario %s", row.Scenario)
		names = append(names, row.Scenario)
	}
	require.Equal(t, bench.RowNames(bench.Scenarios), names)

	var table, js bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.NoError(t, rep.WriteJSON(&js))
	for _, name := range names {
		require.Contains(t, table.String(), name)
		require.Contains(t, js.String(), `"scenario": "`+name+`"`)
	}
}

func TestConfigValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  bench.Config
		want string
	}{
		{"no database", bench.Config{}, "DatabaseURL"},
		{"unknown scenario", bench.Config{DatabaseURL: dbtest.URL(), Only: []string{"nope"}}, "Only"},
		{"unknown size", bench.Config{DatabaseURL: dbtest.URL(), Size: "huge"}, "size"},
		{"a row of no scenario run", bench.Config{DatabaseURL: dbtest.URL(), Only: []string{"drain"}, Rows: []string{"own limits"}}, "Rows"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := bench.Run(context.Background(), &tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
