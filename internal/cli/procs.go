package cli

import (
	"context"
	"log/slog"
	"runtime"

	"github.com/syncer-dev/syncer/internal/procs"
)

// adaptProcs runs the daemon on one P while it is lightly loaded and on
// every P Go would give it otherwise (internal/procs), for as long as ctx
// lasts. GOMAXPROCS in the environment is the operator's choice: the
// runtime has applied it and it is left alone.
func adaptProcs(ctx context.Context, logger *slog.Logger, lookupEnv func(string) (string, bool)) {
	if v, ok := lookupEnv("GOMAXPROCS"); ok {
		logger.Info("run: GOMAXPROCS", slog.String("source", "GOMAXPROCS="+v), slog.Int("procs", runtime.GOMAXPROCS(0)))
		return
	}
	g := procs.New(procs.Config{Logger: logger})
	logger.Info("run: GOMAXPROCS", slog.String("source", "adaptive"), slog.Int("procs_min", 1), slog.Int("procs_max", runtime.GOMAXPROCS(0)))
	go g.Run(ctx)
}
