package verify

import (
	"context"
	"time"
)

// Due is due, for the tests.
var Due = due

// WithClock stubs the pace's clock and sleep, for the tests.
func (p *Pace) WithClock(now func() time.Time, sleep func(context.Context, time.Duration) error) *Pace {
	p.now, p.sleep = now, sleep
	return p
}
