package daemon

import (
	"context"
	"time"

	"github.com/syncer-dev/syncer/internal/metrics"
)

// BreakerState exposes breakerState to the tests.
func BreakerState(raw []byte, now time.Time) int { return int(breakerState(raw, now)) }

// RefreshGauges runs one refresh of the gauges.
func (d *Daemon) RefreshGauges(ctx context.Context) error { return d.refreshGauges(ctx) }

// Metrics returns the daemon's collectors.
func (d *Daemon) Metrics() *metrics.Metrics { return d.metrics }
