package daemon

import (
	"context"
	"time"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// RefreshGauges runs one refresh of the gauges.
func (d *Daemon) RefreshGauges(ctx context.Context) error { return d.refreshGauges(ctx, true) }

// Metrics returns the daemon's collectors.
func (d *Daemon) Metrics() *metrics.Metrics { return d.metrics }

// Guarded is the guard the daemon puts around every destination's client.
func Guarded(c delivery.Client) delivery.Client { return guarded{c} }

// SetFetchPoll sets River's fetch poll of a daemon built from c.
func SetFetchPoll(c *Config, d time.Duration) { c.fetchPoll = d }
