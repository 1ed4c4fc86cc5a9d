package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/exporter"
)

// TestRunDefaultsAppliedByTheirOwners pins the effective batch size and
// in-flight limit of `syncer run` as docs/protocol.md states them (500 and
// 4): the flags leave an unset value to the owner's Config (the exporter's
// BatchSize, the deliverer's MaxInFlight), which applies its documented
// default once, and a value set on the command line goes through as it is.
func TestRunDefaultsAppliedByTheirOwners(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name            string
		args            []string
		batch, inFlight int
	}{
		{"unset", nil, 500, 4},
		{"set", []string{"--batch-size", "50", "--max-in-flight", "2"}, 50, 2},
		{"set to the defaults", []string{"--batch-size", "500", "--max-in-flight", "4"}, 500, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var root CLI
			p := syncer
			p.Vars = vars()
			parser, err := NewParser(p, &root, io.Discard, io.Discard)
			require.NoError(t, err)
			_, err = parser.Parse(append([]string{"run", "--database-url", "postgres://127.0.0.1:5432/test",
				"--thirdparty-url", "http://127.0.0.1:9"}, tt.args...))
			require.NoError(t, err)
			dc := root.Run.daemonConfig(nil, nil, &Env{Logger: slog.New(slog.DiscardHandler)})
			// The daemon sets these from the database.
			dc.Exporter.Schema, dc.Exporter.Installation = "public", "test"
			exp, err := exporter.New(nil, nil, &dc.Exporter)
			require.NoError(t, err)
			require.Equal(t, tt.batch, exp.BatchSize(), "the effective batch size")
			require.Equal(t, tt.inFlight, dc.Delivery.WithDefaults().MaxInFlight, "the effective in-flight limit")
		})
	}
}

// TestRunRefusesZeroBatchSizeAndInFlight: a setting left to its owner's
// default is still refused when set to 0, as before.
func TestRunRefusesZeroBatchSizeAndInFlight(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ flag, want string }{
		{"--batch-size", "--batch-size (SYNCER_BATCH_SIZE) must be positive, got 0"},
		{"--max-in-flight", "--max-in-flight (SYNCER_MAX_IN_FLIGHT) must be positive, got 0"},
	} {
		t.Run(tt.flag, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			code := Main(context.Background(), []string{"run", "--database-url", "postgres://127.0.0.1:5432/test",
				"--thirdparty-url", "http://127.0.0.1:9", tt.flag, "0"}, io.Discard, &stderr)
			require.Equal(t, 2, code, stderr.String())
			require.Equal(t, "syncer: "+tt.want, strings.TrimSpace(stderr.String()))
		})
	}
}
