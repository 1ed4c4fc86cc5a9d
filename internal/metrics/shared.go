package metrics

// Shared returns a view of d for one of several deliverers sending for the
// destination at once (its tenants' deliverers, contract section 10): their
// requests, answers, 429s, rejection storms, requests in flight and last
// success add up into the destination's series, while the gauges of one
// deliverer's state (breaker, learned rate, in-flight limit, refusal,
// misconfiguration, pause) stay the destination's own deliverer's: set by
// tenants, they would flip between tenants on every request. There is no
// label per tenant (unbounded). Nil on a nil d.
func (d *Destination) Shared() *Destination {
	if d == nil {
		return nil
	}
	c := *d
	c.shared = true
	return &c
}
