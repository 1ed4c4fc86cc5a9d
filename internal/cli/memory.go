package cli

import (
	"errors"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of a container's memory limit given to the
// Go heap as its soft limit; the rest is for what the runtime does not
// count (stacks, the binary, C allocations).
const memoryLimitRatio = 0.9

// memoryLimit decides the Go runtime's soft memory limit for the daemon:
// GOMEMLIMIT when set (the runtime has already applied it); otherwise a
// share of the container's cgroup limit, read by automemlimit, so the
// collector works harder before the kernel's OOM killer does; otherwise
// none. A fixed limit of our own was tried: 16 MiB cost 2.5x the CPU with
// 8 KiB payloads for 5 MB less peak memory (see `syncer-lab bench --only
// memory-limit`), so without a limit from the operator, none is set.
func memoryLimit(lookupEnv func(string) (string, bool), cgroup memlimit.Provider) (limit int64, source string, err error) {
	if v, ok := lookupEnv("GOMEMLIMIT"); ok {
		return 0, "GOMEMLIMIT=" + v, nil
	}
	n, err := cgroup()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit), err == nil && n == 0:
		return 0, "none", nil
	case err != nil:
		return 0, "none", err
	}
	return int64(float64(n) * memoryLimitRatio), "container", nil
}

// setMemoryLimit applies memoryLimit and says what it chose.
func setMemoryLimit(logger *slog.Logger) {
	limit, source, err := memoryLimit(os.LookupEnv, memlimit.FromCgroup)
	if err != nil {
		// Outside a cgroup v1/v2 hierarchy (or without /proc) there is no
		// container limit to read; that is not a reason to stop.
		logger.Debug("run: no container memory limit read", slog.String("error", err.Error()))
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	logger.Info("run: memory limit", slog.String("source", source), slog.Int64("soft_limit_bytes", limit))
}

// heapSampling says whether the daemon samples its allocations for a heap
// profile: only when it serves /debug/pprof/ (--pprof), or when GODEBUG
// sets memprofilerate itself. Sampling is on in every Go program by
// default, and its table of allocation stacks (1.4 MiB, touched a page
// per stack met) was 1-2 MiB of the daemon's peak RSS while it drained,
// for a profile nobody could fetch (docs/benchmarks.md, memory).
func heapSampling(pprof bool, lookupEnv func(string) (string, bool)) bool {
	godebug, _ := lookupEnv("GODEBUG")
	return pprof || strings.Contains(godebug, "memprofilerate=")
}

// setHeapSampling applies heapSampling; it runs first in `syncer run`, so
// few stacks were recorded before.
func setHeapSampling(pprof bool) {
	if !heapSampling(pprof, os.LookupEnv) {
		runtime.MemProfileRate = 0
	}
}

// gcPercentDefault is the collector's target for the daemon when GOGC is
// not set: Go's own, 100. It was 50 (issue 46), then 75, to keep the
// drain's peak RSS under 32 MiB; the collector then ran 1.8-3.9 times as
// often as 3cfe467's in a drain, most of the CPU a row the drain had
// lost. The peak came at the start, before the executable's startup
// pages were given back (releaseStartupPages, now when the daemon is
// ready), and the live heap is smaller (pgx's statement caches, issue
// 55): at 100 the drain's peak is under 32 MiB (docs/benchmarks.md, "The
// drain back").
const gcPercentDefault = 100

// gcPercent decides the collector's target: GOGC when set (the runtime
// has already applied it, and percent is 0), otherwise gcPercentDefault.
func gcPercent(lookupEnv func(string) (string, bool)) (percent int, source string) {
	if v, ok := lookupEnv("GOGC"); ok {
		return 0, "GOGC=" + v
	}
	return gcPercentDefault, "default"
}

// setGCPercent applies gcPercent; it runs first in `syncer run`, before
// the heap grows. Go's own target needs no call.
func setGCPercent() (percent int, source string) {
	percent, source = gcPercent(os.LookupEnv)
	if percent > 0 && percent != 100 {
		debug.SetGCPercent(percent)
	}
	return percent, source
}
