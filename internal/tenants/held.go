package tenants

import "github.com/syncer-dev/syncer/internal/delivery"

// Held returns tenant's deliverer as the registry holds it, reading
// nothing: for a look at whether the tenant would send (an exporter's
// readiness before it reads the tenant's rows). ok is false when only For
// may answer: no deliverer held (never read, unconnected, an unusable
// row), its credentials refused, or its row due a read of its own
// (RefreshEvery, stale). The read of the row right before a batch
// (ReadFresh) stays For's, asked for each batch: a readiness look that
// made it waited for it in the exporter's lane, which reads its tenants
// one after another (issue 54: 12 to 17% of a busy lane's time, and the
// lane's slowest tenants short of their limits).
func (r *Registry) Held(tenant string) (d *delivery.Deliverer, ok bool) {
	now := r.cfg.Now()
	r.mu.Lock()
	e := r.entries[tenant]
	r.mu.Unlock()
	if e == nil {
		return nil, false
	}
	// Asked for, as For is: a tenant only looked at (its wait long, a
	// 429's pause) keeps its entry and what its deliverer knows.
	e.usedAt.Store(now.UnixNano())
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.d == nil || e.stale.Load() || e.readAt.IsZero() || now.Sub(e.readAt) >= r.cfg.RefreshEvery || refused(e.d, now) {
		return nil, false
	}
	return e.d, true
}
