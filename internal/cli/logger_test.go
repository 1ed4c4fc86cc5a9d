package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestJSONLogsWriteDurationsInSeconds(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	newLogger(&buf, "json", "info").Info("x", slog.Duration("took", 1500*time.Millisecond),
		slog.Group("g", slog.Duration("retry_in", 2*time.Second)))
	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	require.InDelta(t, 1.5, got["took"], 1e-9)
	require.InDelta(t, 2.0, got["g"].(map[string]any)["retry_in"], 1e-9)

	buf.Reset()
	newLogger(&buf, "text", "info").Info("x", slog.Duration("took", 1500*time.Millisecond))
	require.Contains(t, buf.String(), "took=1.5s")
}

func TestDurationText(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", 90 * time.Second: "1m30s", time.Hour: "1h", 30 * time.Second: "30s", 500 * time.Millisecond: "500ms",
	} {
		require.Equal(t, want, durationText(d))
	}
}
