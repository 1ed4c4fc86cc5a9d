// Package delivery turns "push this batch" into the right sequence of HTTP
// requests to the third party: paced by one rate limiter, split when the
// third party refuses a batch as a whole, and mapped to an Outcome of
// accepted and rejected items.
package delivery

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	"golang.org/x/time/rate"

	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Client is the HTTP client of the third party.
type Client interface {
	Push(ctx context.Context, key string, items []thirdparty.Item) (*thirdparty.Result, error)
}

var _ Client = (*thirdparty.Client)(nil)

// Defaults for Config.
const (
	RateBurstDefault = 1
)

// Config configures a Deliverer.
type Config struct {
	// RateLimit is the most requests a second this process sends; 0 means no
	// limit. Defaults to 0.
	RateLimit float64
	// RateBurst is the limiter's burst. Defaults to RateBurstDefault.
	RateBurst int
	// Salt is mixed into the keys of split halves. Defaults to "".
	Logger  *slog.Logger
	Metrics *metrics.Metrics
}

// Deliverer delivers batches.
type Deliverer struct {
	client  Client
	limiter *rate.Limiter
	logger  *slog.Logger
	metrics *metrics.Metrics
}

// New returns a Deliverer.
func New(client Client, cfg *Config) (*Deliverer, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.RateLimit < 0 {
		return nil, fmt.Errorf("delivery: RateLimit must not be negative, got %v", cfg.RateLimit)
	}
	if cfg.RateBurst < 0 {
		return nil, fmt.Errorf("delivery: RateBurst must not be negative, got %d", cfg.RateBurst)
	}
	limit := rate.Inf
	if cfg.RateLimit > 0 {
		limit = rate.Limit(cfg.RateLimit)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Deliverer{
		client:  client,
		limiter: rate.NewLimiter(limit, cmp.Or(cfg.RateBurst, RateBurstDefault)),
		logger:  logger,
		metrics: cfg.Metrics,
	}, nil
}

// Deliver pushes a batch and returns what the third party made of it.
func (d *Deliverer) Deliver(ctx context.Context, b Batch) (*Outcome, error) {
	key, items := b.Key, b.Items
	if err := d.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("delivery: rate limit: %w", err)
	}
	res, err := d.client.Push(ctx, key, items)
	if err != nil {
		return nil, err
	}
	out := &Outcome{Requests: 1}
	rejected := make(map[int64]string, len(res.Rejected))
	for _, r := range res.Rejected {
		rejected[r.ID] = r.Error
	}
	for _, it := range items {
		if msg, ok := rejected[it.ID]; ok {
			out.Rejected = append(out.Rejected, Rejection{Item: it, Error: msg})
		} else {
			out.Accepted = append(out.Accepted, it)
		}
	}
	return out, nil
}
