package cli

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
)

// GOMAXPROCS in the environment is the operator's: run says so and starts
// no governor.
func TestAdaptProcsLeavesAnOperatorsChoice(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	var buf bytes.Buffer
	env := func(k string) (string, bool) {
		if k == "GOMAXPROCS" {
			return "3", true
		}
		return "", false
	}
	adaptProcs(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)), env)
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("GOMAXPROCS %d, want it left at %d", got, before)
	}
	if !strings.Contains(buf.String(), `source="GOMAXPROCS=3"`) {
		t.Fatalf("log %q does not say where GOMAXPROCS came from", buf.String())
	}
}
