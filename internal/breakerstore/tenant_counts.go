package breakerstore

import "time"

// CountTenants counts a source's tenants by state at now (every state of
// TenantStates, 0 when none), as status and the gauges show them
// (docs/protocol.md section 10, "Seen and acted on"). pending holds every
// tenant of the source with rows pending or failed, with its pending
// rows: each is counted in its state, whatever its facts. A tenant of
// facts without rows is counted only while Counted. unconnectedPending
// counts the unconnected tenants with pending rows: those rows wait for a
// connection row.
func CountTenants(facts map[string]*TenantFacts, pending map[string]int64, now time.Time) (byState map[string]int, unconnectedPending int) {
	byState = make(map[string]int, len(TenantStates))
	for _, s := range TenantStates {
		byState[s] = 0
	}
	for name, rows := range pending {
		var f TenantFacts
		if p := facts[name]; p != nil {
			f = *p
		}
		state, _ := f.StateAt(now)
		byState[state]++
		if state == TenantUnconnected && rows > 0 {
			unconnectedPending++
		}
	}
	for name, f := range facts {
		if _, ok := pending[name]; !ok && f.Counted() {
			state, _ := f.StateAt(now)
			byState[state]++
		}
	}
	return byState, unconnectedPending
}

// Counted reports whether a tenant without rows pending or failed is
// counted: only while a person's pause holds it (docs/protocol.md
// section 10.1, "Tenants come and go"). What else syncer kept of it (a
// learnt rate, a refusal, a missing connection row) waits for nothing:
// a tenant whose rows and connection were deleted is gone, and
// TidyTenants deletes its facts.
func (f *TenantFacts) Counted() bool { return f.Hold.Paused }
