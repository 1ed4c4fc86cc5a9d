package daemon

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/riverqueue/river/rivertype"
)

// riverStartWait is how long the start tries River's first connection
// again: a daemon started while PostgreSQL restarts meets it there.
const riverStartWait = 30 * time.Second

// startRiver starts River, trying again with backoff while its first
// connection fails (River stops what it started before it returns an
// error, so it can be started again), until riverStartWait or ctx ends.
func (d *Daemon) startRiver(ctx, runCtx context.Context) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, riverStartWait
	return backoff.RetryNotify(func() error { return d.river.Start(runCtx) }, backoff.WithContext(b, ctx),
		func(err error, wait time.Duration) {
			d.logger.WarnContext(ctx, "daemon: start river: trying again", slog.Duration("in", wait), slog.String("error", err.Error()))
		})
}

// atLeast passes on records at or above min, unless the handler was set up
// for debug. River logs routine counts at info every few seconds; an
// operator reading syncer's info log wants syncer's lines.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	if h.Handler.Enabled(ctx, slog.LevelDebug) {
		return true
	}
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.min}
}

// cappedRetry is River's retry policy for syncer's jobs: exponential with
// jitter, but never more than max. Expected conditions (a busy lock, an open
// breaker, a 429) snooze instead and never get here; what does get here is a
// database or programming error, and River's default (attempt^4 seconds)
// would leave rows waiting for minutes after a database restart.
type cappedRetry struct{ max time.Duration }

func (p cappedRetry) NextRetry(job *rivertype.JobRow) time.Time {
	d := min(time.Duration(1<<min(job.Attempt, 10))*100*time.Millisecond, p.max)
	return time.Now().Add(d/2 + rand.N(d/2+1))
}
