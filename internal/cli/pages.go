package cli

import (
	"context"
	"log/slog"
	"time"
)

// releasePagesAfter is how long after its database pool opens `run`
// gives back the executable's pages: the daemon's components are
// starting by then, and a page they touch after comes back as it is used.
const releasePagesAfter = 500 * time.Millisecond

// releaseStartupPages waits after, then drops the executable's read-only
// pages from the resident set (releaseExecutablePages). Every package's
// init, the command line's parsing and the code of commands `run` never
// calls touch most of the 23 MB binary at startup, and the kernel maps
// file pages 64 KiB around each one touched: 19-20 MiB of the daemon's
// resident set was its own binary. Dropped, only the pages the daemon
// runs come back (from the page cache, not the disk): 16.5 MiB of file
// pages in a drain where there were 20, which pays for a collector
// target of 75 instead of 50 (gcPercentDefault; docs/benchmarks.md,
// "The drain back"). The pages stay in the page
// cache, shared and reclaimable as before; the resident set, what a
// container's RSS shows and the bench's peak measures, is what shrinks.
func releaseStartupPages(ctx context.Context, logger *slog.Logger, after time.Duration) {
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	n, err := releaseExecutablePages()
	if err != nil {
		logger.DebugContext(ctx, "run: executable pages not released", slog.String("error", err.Error()))
		return
	}
	logger.DebugContext(ctx, "run: executable pages released", slog.Int64("bytes", n))
}
