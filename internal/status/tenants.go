package status

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// TopTenantsDefault is how many tenants a source's entry lists: those
// with the most pending rows.
const TopTenantsDefault = 10

// Tenants is what status says of a source with a tenant column
// (docs/protocol.md section 10, "Seen and acted on"): its tenants counted
// by state and the ones with the most pending rows. The tenants counted
// are those with rows pending or failed, or paused by a person: a tenant
// with nothing to send is not counted, whatever syncer learnt of it, and
// the connections table is not read (it holds credentials).
type Tenants struct {
	// Counts are the tenants by state: every state of
	// breakerstore.TenantStates, 0 when none.
	Counts map[string]int `json:"counts"`
	// UnconnectedPending counts the unconnected tenants with pending
	// rows: those rows wait for a connection row.
	UnconnectedPending int `json:"unconnected_pending"`
	// Top are the tenants with the most pending rows, most first.
	Top []Tenant `json:"top"`
	// Paused names every tenant a person paused (syncer pause --tenant,
	// the console), with rows pending or none, sorted: Top lists tenants
	// with rows only, and a paused tenant must be found to be resumed.
	Paused []string `json:"paused"`
}

// Tenant is one tenant of a source.
type Tenant struct {
	Tenant               string  `json:"tenant"`
	Pending              int64   `json:"pending"`
	Failed               int64   `json:"failed"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	// State is one of breakerstore.TenantStates.
	State string `json:"state"`
	// Error says why it is not ok (a refusal's message, the missing
	// connection row, a 429's cause); never a secret.
	Error string `json:"error,omitempty"`
}

// ReadTenants reads the tenants of source src, a source with a tenant
// column sending to destination dest, with the top of them by pending
// rows. It costs two grouped reads of the source's changes and failures
// and one read of the destination's tenant facts, whatever the number of
// tenants.
func ReadTenants(ctx context.Context, q database.Querier, src, dest string, top int) (*Tenants, error) {
	return ReadTenantsIn(ctx, q, src, dest, top, "")
}

// ReadTenantsIn is ReadTenants whose Top holds only tenants in state (all
// when empty): with rows first, by pending rows, then those with none.
func ReadTenantsIn(ctx context.Context, q database.Querier, src, dest string, top int, state string) (*Tenants, error) {
	facts, err := breakerstore.ReadTenants(ctx, q, dest)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	now := time.Now()
	var keep func(string) bool
	if state != "" {
		keep = func(tenant string) bool {
			var f breakerstore.TenantFacts
			if p := facts[tenant]; p != nil {
				f = *p
			}
			s, _ := f.StateAt(now)
			return s == state
		}
	}
	backlog, err := sources.TenantsBacklog(ctx, q, src, top, "", keep)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	t := &Tenants{Top: []Tenant{}, Paused: PausedTenants(facts)}
	t.Counts, t.UnconnectedPending = breakerstore.CountTenants(facts, backlog.Pending(), now)
	for _, rows := range backlog.Top {
		var f breakerstore.TenantFacts
		if p := facts[rows.Tenant]; p != nil {
			f = *p
		}
		t.Top = append(t.Top, tenantOf(rows, f, now))
	}
	if state == "" {
		return t, nil
	}
	// Tenants of the state with no rows (a pause of an idle tenant), by
	// value, after those with rows.
	var idle []string
	for name, f := range facts {
		if s, _ := f.StateAt(now); s == state && backlog.Rows[name] == nil && f.Counted() {
			idle = append(idle, name)
		}
	}
	slices.Sort(idle)
	for _, name := range idle[:min(len(idle), max(top-len(t.Top), 0))] {
		t.Top = append(t.Top, tenantOf(&sources.TenantRows{Tenant: name}, *facts[name], now))
	}
	return t, nil
}

// ReadTenant reads one tenant of source src (sending to dest), whether or
// not it has rows.
func ReadTenant(ctx context.Context, q database.Querier, src, dest string, t tenant.Tenant) (Tenant, error) {
	backlog, err := sources.TenantsBacklog(ctx, q, src, 1, t.String(), nil)
	if err != nil {
		return Tenant{}, fmt.Errorf("status: %w", err)
	}
	f, err := breakerstore.ReadTenant(ctx, q, dest, t)
	if err != nil {
		return Tenant{}, fmt.Errorf("status: tenant %s: %w", t, err)
	}
	return tenantOf(backlog.Rows[t.String()], f, time.Now()), nil
}

func tenantOf(rows *sources.TenantRows, f breakerstore.TenantFacts, now time.Time) Tenant {
	state, text := f.StateAt(now)
	return Tenant{Tenant: rows.Tenant, Pending: rows.Pending, Failed: rows.Failed,
		OldestPendingSeconds: rows.OldestPending.Seconds(), State: state, Error: text}
}

// readTenants fills the Tenants of every entry of a source with a tenant
// column.
func (r *Report) readTenants(ctx context.Context, q database.Querier) error {
	withTenant, err := sources.TenantSources(ctx, q)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	for i := range r.Sources {
		src := &r.Sources[i]
		if _, ok := withTenant[src.Name]; !ok {
			continue
		}
		if src.Tenants, err = ReadTenants(ctx, q, src.Name, src.Destination, TopTenantsDefault); err != nil {
			return err
		}
	}
	return nil
}

// PausedTenants names the tenants of facts (breakerstore.ReadTenants) a
// person paused, sorted.
func PausedTenants(facts map[string]*breakerstore.TenantFacts) []string {
	out := []string{}
	for name, f := range facts {
		if f.Hold.Paused {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
