package daemon

import "time"

// BreakerState exposes breakerState to the tests.
func BreakerState(raw []byte, now time.Time) int { return int(breakerState(raw, now)) }
