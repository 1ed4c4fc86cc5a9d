package exporter

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
)

// levels is a slog.Handler that keeps the level of each line by message.
type levels struct {
	mu  sync.Mutex
	got map[string][]slog.Level
}

func (l *levels) Enabled(context.Context, slog.Level) bool { return true }
func (l *levels) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got[r.Message] = append(l.got[r.Message], r.Level)
	return nil
}
func (l *levels) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levels) WithGroup(string) slog.Handler      { return l }

// Issue 45: a job that waits on a person's pause snoozes without a
// warning (the deliverer logs the pause once when it starts and once when
// it ends); a job that waits on the third party's pause still warns.
func TestPersonsPauseSnoozesQuietly(t *testing.T) {
	t.Parallel()
	logs := &levels{got: map[string][]slog.Level{}}
	e := &Exporter{logger: slog.New(logs), cfg: Config{MaxSnooze: time.Minute}}
	ctx := t.Context()
	for range 3 {
		require.Error(t, e.jobResult(ctx, &delivery.WaitError{Err: delivery.ErrHeld, Wait: 2 * time.Second}))
	}
	require.Equal(t, []slog.Level{slog.LevelDebug, slog.LevelDebug, slog.LevelDebug}, logs.got["exporter: pausing"])
	logs.got = map[string][]slog.Level{}
	require.Error(t, e.jobResult(ctx, &delivery.WaitError{Err: delivery.ErrPaused, Wait: 2 * time.Second}))
	require.Equal(t, []slog.Level{slog.LevelWarn}, logs.got["exporter: pausing"])
}
