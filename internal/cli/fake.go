package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncer-dev/syncer/internal/fakethirdparty"
)

// FakeThirdpartyCmd is `syncer fake-thirdparty`.
type FakeThirdpartyCmd struct {
	Addr               string        `name:"addr" env:"FAKE_ADDR" default:"127.0.0.1:8081" help:"Address to serve on."`
	RateLimit          float64       `name:"rate-limit" env:"FAKE_RATE_LIMIT" default:"0" help:"Requests a second accepted; beyond it 429 with Retry-After. 0: unlimited."`
	RateBurst          int           `name:"rate-burst" env:"FAKE_RATE_BURST" default:"0" help:"Burst of the fake's rate limit."`
	RetryAfter         time.Duration `name:"retry-after" env:"FAKE_RETRY_AFTER" default:"0s" help:"Retry-After sent with 429 (default: computed)."`
	RetryAfterHTTPDate bool          `name:"retry-after-http-date" env:"FAKE_RETRY_AFTER_HTTP_DATE" help:"Send Retry-After as an HTTP date."`
	FailureRate        float64       `name:"failure-rate" env:"FAKE_FAILURE_RATE" default:"0" help:"Share (0..1) of requests answered with a 5xx."`
	FailureStatus      int           `name:"failure-status" env:"FAKE_FAILURE_STATUS" default:"503" help:"Status of injected failures."`
	Latency            time.Duration `name:"latency" env:"FAKE_LATENCY" default:"0s" help:"Added to every request."`
	TimeoutRate        float64       `name:"timeout-rate" env:"FAKE_TIMEOUT_RATE" default:"0" help:"Share (0..1) of requests never answered."`
	MaxBatchItems      int           `name:"max-batch-items" env:"FAKE_MAX_BATCH_ITEMS" default:"0" help:"Answer 413 to larger batches. 0: no limit."`
	RejectField        string        `name:"reject-field" env:"FAKE_REJECT_FIELD" help:"Reject items whose payload has this top-level key."`
	PoisonField        string        `name:"poison-field" env:"FAKE_POISON_FIELD" help:"Answer 400 to batches holding a payload with this top-level key."`
	Token              string        `name:"token" env:"FAKE_TOKEN" help:"Require this bearer token (401 otherwise)."`
	IgnoreKeys         bool          `name:"ignore-idempotency-key" env:"FAKE_IGNORE_IDEMPOTENCY_KEY" help:"Treat every request as new, as a third party without idempotency would."`
	Outage             time.Duration `name:"outage" env:"FAKE_OUTAGE" default:"0s" help:"Answer 503 to everything for this long after start."`
	Seed               int64         `name:"seed" env:"FAKE_SEED" default:"0" help:"Seed of the random shares (0: random)."`
}

// Validate checks the shares.
func (c *FakeThirdpartyCmd) Validate() error {
	switch {
	case c.FailureRate < 0 || c.FailureRate > 1:
		return usagef("--failure-rate must be between 0 and 1, got %v", c.FailureRate)
	case c.TimeoutRate < 0 || c.TimeoutRate > 1:
		return usagef("--timeout-rate must be between 0 and 1, got %v", c.TimeoutRate)
	case c.RateLimit < 0:
		return usagef("--rate-limit must not be negative, got %v", c.RateLimit)
	}
	return nil
}

// Run serves until SIGTERM or SIGINT.
func (c *FakeThirdpartyCmd) Run(ctx context.Context, env *Env) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fake := fakethirdparty.New(fakethirdparty.Config{
		RateLimit: c.RateLimit, RateBurst: c.RateBurst, RetryAfter: c.RetryAfter, RetryAfterHTTPDate: c.RetryAfterHTTPDate,
		FailureRate: c.FailureRate, FailureStatus: c.FailureStatus, Latency: c.Latency, TimeoutRate: c.TimeoutRate,
		MaxBatchItems: c.MaxBatchItems, RejectField: c.RejectField, PoisonField: c.PoisonField, Token: c.Token,
		IgnoreIdempotencyKey: c.IgnoreKeys, Seed: c.Seed,
	})
	if c.Outage > 0 {
		fake.Outage(c.Outage)
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(env.Stdout, "fake third party listening on http://%s (stats: GET /v1/stats)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
