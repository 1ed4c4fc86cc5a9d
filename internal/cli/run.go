package cli

import (
	"context"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// RunCmd is `syncer run`.
type RunCmd struct {
	DB
	ThirdpartyURL      string        `name:"thirdparty-url" env:"SYNCER_THIRDPARTY_URL" help:"Base URL of the third-party API (batches go to URL/v1/batches)."`
	ThirdpartyToken    string        `name:"thirdparty-token" env:"SYNCER_THIRDPARTY_TOKEN" help:"Bearer token sent to the third party, if set. Never logged."`
	BatchSize          int           `name:"batch-size" env:"SYNCER_BATCH_SIZE" default:"500" help:"Items a batch."`
	BatchMaxBytes      int           `name:"batch-max-bytes" env:"SYNCER_BATCH_MAX_BYTES" default:"4194304" help:"Payload bytes a batch, at most."`
	RateLimit          float64       `name:"rate-limit" env:"SYNCER_RATE_LIMIT" default:"0" help:"Requests a second to the third party; 0 means no limit."`
	RateBurst          int           `name:"rate-burst" env:"SYNCER_RATE_BURST" default:"1" help:"Burst of the rate limit."`
	BreakerFailures    int           `name:"breaker-failures" env:"SYNCER_BREAKER_FAILURES" default:"5" help:"Consecutive transient failures that open the circuit breaker."`
	BreakerOpenTimeout time.Duration `name:"breaker-open-timeout" env:"SYNCER_BREAKER_OPEN_TIMEOUT" default:"10s" help:"How long the circuit breaker stays open before a probe."`
	BackoffMaxElapsed  time.Duration `name:"backoff-max-elapsed" env:"SYNCER_BACKOFF_MAX_ELAPSED" default:"60s" help:"How long one batch is retried after transient failures before the job pauses."`
	RequestTimeout     time.Duration `name:"request-timeout" env:"SYNCER_REQUEST_TIMEOUT" default:"10s" help:"Timeout of one request to the third party."`
	ShutdownTimeout    time.Duration `name:"shutdown-timeout" env:"SYNCER_SHUTDOWN_TIMEOUT" default:"30s" help:"How long the batch in flight may take to finish on SIGTERM."`
	HTTPAddr           string        `name:"http-addr" env:"SYNCER_HTTP_ADDR" default:"127.0.0.1:8080" help:"Address of /healthz, /readyz and /metrics."`
	Workers            int           `name:"workers" env:"SYNCER_WORKERS" default:"4" help:"River workers for syncer's queue."`
	Pprof              bool          `name:"pprof" env:"SYNCER_PPROF" help:"Serve /debug/pprof/ on the HTTP address."`
	MaxInFlight        int           `name:"max-in-flight" env:"SYNCER_MAX_IN_FLIGHT" default:"4" help:"Requests to the third party unanswered at once, at most."`
	MaxRetryAfter      time.Duration `name:"max-retry-after" env:"SYNCER_MAX_RETRY_AFTER" default:"15m" help:"Longest wait a Retry-After or a quota reset may impose; longer ones are cut to it, and logged."`
	ReplayShare        float64       `name:"replay-share" env:"SYNCER_REPLAY_SHARE" default:"0.25" help:"Least share of the batches a replay gets while live rows keep arriving (0 < share <= 1)."`
}

// Validate names the first bad setting.
func (c *RunCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if err := validateExport(c.ThirdpartyURL, c.BatchSize, c.BatchMaxBytes, c.RateLimit, c.RateBurst, c.RequestTimeout, c.ShutdownTimeout, c.Workers); err != nil {
		return err
	}
	switch {
	case c.MaxInFlight <= 0:
		return usagef("--max-in-flight (SYNCER_MAX_IN_FLIGHT) must be positive, got %d", c.MaxInFlight)
	case c.MaxRetryAfter <= 0:
		return usagef("--max-retry-after (SYNCER_MAX_RETRY_AFTER) must be positive, got %s", c.MaxRetryAfter)
	case !(c.ReplayShare > 0 && c.ReplayShare <= 1):
		return usagef("--replay-share (SYNCER_REPLAY_SHARE) must be above 0 and at most 1, got %v", c.ReplayShare)
	}
	return validateDelivery(c.BreakerFailures, c.BreakerOpenTimeout, c.BackoffMaxElapsed)
}

func validateDelivery(breakerFailures int, breakerOpen, maxElapsed time.Duration) error {
	switch {
	case breakerFailures <= 0:
		return usagef("--breaker-failures (SYNCER_BREAKER_FAILURES) must be positive, got %d", breakerFailures)
	case breakerOpen <= 0:
		return usagef("--breaker-open-timeout (SYNCER_BREAKER_OPEN_TIMEOUT) must be positive, got %s", breakerOpen)
	case maxElapsed <= 0:
		return usagef("--backoff-max-elapsed (SYNCER_BACKOFF_MAX_ELAPSED) must be positive, got %s", maxElapsed)
	}
	return nil
}

func validateExport(tpURL string, batch, maxBytes int, rate float64, burst int, reqTimeout, shutdown time.Duration, workers int) error {
	switch {
	case tpURL == "":
		return usagef("--thirdparty-url (SYNCER_THIRDPARTY_URL) is required")
	case !validHTTPURL(tpURL):
		return usagef("--thirdparty-url (SYNCER_THIRDPARTY_URL) must be an http or https URL")
	case batch <= 0:
		return usagef("--batch-size (SYNCER_BATCH_SIZE) must be positive, got %d", batch)
	case maxBytes <= 0:
		return usagef("--batch-max-bytes (SYNCER_BATCH_MAX_BYTES) must be positive, got %d", maxBytes)
	case rate < 0:
		return usagef("--rate-limit (SYNCER_RATE_LIMIT) must not be negative, got %v", rate)
	case burst <= 0:
		return usagef("--rate-burst (SYNCER_RATE_BURST) must be positive, got %d", burst)
	case reqTimeout <= 0:
		return usagef("--request-timeout (SYNCER_REQUEST_TIMEOUT) must be positive, got %s", reqTimeout)
	case shutdown <= 0:
		return usagef("--shutdown-timeout (SYNCER_SHUTDOWN_TIMEOUT) must be positive, got %s", shutdown)
	case workers <= 0:
		return usagef("--workers (SYNCER_WORKERS) must be positive, got %d", workers)
	}
	return nil
}

func validHTTPURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// memoryLimitFloor is the least soft memory limit run sets when GOMEMLIMIT
// is not set.
const memoryLimitFloor = 16 << 20

// memoryLimit is the Go runtime's soft memory limit for the daemon: room for
// about ten batches of payloads (the pipeline holds up to eight: read ahead,
// pushing, waiting for their marks), at least memoryLimitFloor. The drain's
// working set does not grow with the table, so a limit keeps the collector
// from letting garbage double the heap. GOMEMLIMIT, if set, wins.
func (c *RunCmd) memoryLimit() int64 {
	perBatch := min(int64(c.BatchMaxBytes), int64(c.BatchSize)*2048)
	return max(memoryLimitFloor, 10*perBatch)
}

// Run runs the daemon until SIGTERM or SIGINT.
func (c *RunCmd) Run(ctx context.Context, env *Env) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(c.memoryLimit())
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	pool, err := database.Open(ctx, c.DatabaseURL, "syncer")
	if err != nil {
		return err
	}
	defer pool.Close()
	return daemon.Run(ctx, pool, &daemon.Config{
		ThirdParty: thirdparty.Config{URL: c.ThirdpartyURL, Token: c.ThirdpartyToken, Timeout: c.RequestTimeout},
		Delivery: delivery.Config{
			RateLimit:          c.RateLimit,
			RateBurst:          c.RateBurst,
			BreakerFailures:    c.BreakerFailures,
			BreakerOpenTimeout: c.BreakerOpenTimeout,
			MaxElapsed:         c.BackoffMaxElapsed,
			MaxInFlight:        c.MaxInFlight,
			MaxRetryAfter:      c.MaxRetryAfter,
		},
		Exporter: exporter.Config{
			BatchSize:     c.BatchSize,
			BatchMaxBytes: c.BatchMaxBytes,
			MaxInFlight:   c.MaxInFlight,
			ReplayShare:   c.ReplayShare,
		},
		HTTPAddr:        c.HTTPAddr,
		Pprof:           c.Pprof,
		ShutdownTimeout: c.ShutdownTimeout,
		Workers:         c.Workers,
		Logger:          env.Logger,
	})
}
