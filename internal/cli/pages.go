package cli

import (
	"context"
	"log/slog"
	"time"
)

// releaseStartupPages drops the executable's read-only pages from the
// resident set (releaseExecutablePages) once the daemon is ready: `run`
// calls it from daemon.Config.Ready, after the daemon's parts have
// started and before its jobs have done much. Every package's init, the
// command line's parsing, the start of the daemon's parts and the code of
// commands `run` never calls touch most of the 23 MB binary, and the
// kernel maps file pages 64 KiB around each one touched: 17-20 MiB of the
// daemon's resident set was its own binary. Dropped, only the pages the
// daemon runs come back (from the page cache, not the disk): 15-17 MiB in
// a drain. It used to run 500 ms after the pool opened, by when a drain
// of a backlog had its heap at full size: the peak RSS was the startup
// pages and the drain's heap at once (issue 55: 32-33 MiB at GOGC 100,
// 30-31 MiB at the same drain with the release at Ready). The pages stay
// in the page cache, shared and reclaimable as before; the resident set,
// what a container's RSS shows and the bench's peak measures, is what
// shrinks.
func releaseStartupPages(ctx context.Context, logger *slog.Logger) {
	n, err := releaseExecutablePages()
	if err != nil {
		logger.DebugContext(ctx, "run: executable pages not released", slog.String("error", err.Error()))
		return
	}
	logger.DebugContext(ctx, "run: executable pages released", slog.Int64("bytes", n))
}

// releasePagesEvery is how often `run` gives the executable's pages back
// again after the first time, at Ready: code that ran once since (a
// verification, a tidy, River's maintenance, a reload, the status page)
// stays resident otherwise, and a drain of 1,000,000 rows ended with 17.2
// MiB of the binary resident, where 100,000 rows ended with 14.6-15.6 (issue
// 55). A release costs a read of /proc/self/smaps and the faults that map
// the code in use back from the page cache, about a millisecond.
const releasePagesEvery = 10 * time.Second

// releasePages gives the executable's pages back every every until ctx
// ends.
func releasePages(ctx context.Context, logger *slog.Logger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			releaseStartupPages(ctx, logger)
		}
	}
}
