package verify

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// Configured is a configured source (an application's table) as a
// Source, through the sources package. Its keys are the table's rows as
// they are now, then its graves (graves.go): a key deleted here is
// forgotten by the table once its tombstone was exported, and read back
// from the row's story. The version last accepted is not known (payloads
// alone are compared).
type Configured struct {
	src *sources.Source
	r   sources.ReplayRange
	// tenant, when set, narrows every call to the tenant's rows.
	tenant tenant.Tenant
	// buf serves the graves (graves.go).
	buf graveBuffer
}

var _ Source = (*Configured)(nil)

// NewConfigured returns src over r, whose bounds are keys in any form the
// source takes (normalized and checked as replays check them).
func NewConfigured(src *sources.Source, r Range) (*Configured, error) {
	rr := sources.ReplayRange{FromKey: r.FromKey, ToKey: r.ToKey}
	if err := src.CheckRange(&rr); err != nil {
		return nil, err
	}
	return &Configured{src: src, r: rr}, nil
}

// Name is the source's name.
func (c *Configured) Name() string { return c.src.Name }

// Page reads the next rows of the table.
func (c *Configured) Page(ctx context.Context, q database.Querier, after string, limit int) ([]Here, error) {
	held, err := sources.HeldPage(ctx, q, c.src, c.scope(), c.r, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Here, len(held))
	for i, h := range held {
		out[i] = Here{ID: h.Key, Payload: h.Payload, Gone: !h.Kept, Pending: h.Pending, Failed: h.Failed}
	}
	return out, nil
}

// Heal logs a change for each key and wakes the daemons.
func (c *Configured) Heal(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
	n, err := sources.Resend(ctx, tx, c.src, c.scope(), ids)
	if err != nil || n == 0 {
		return n, err
	}
	return n, outbox.Wake(ctx, tx, c.src.Name)
}

// PendingOf asks the sources package.
func (c *Configured) PendingOf(ctx context.Context, q database.Querier, ids []string) ([]string, error) {
	return sources.PendingOf(ctx, q, c.src, c.scope(), ids)
}

// AnyPending asks the sources package, of the whole source, a tenant's
// run too (as it always did: a narrower answer is the seam's to give,
// internal/rows).
func (c *Configured) AnyPending(ctx context.Context, q database.Querier) (bool, error) {
	return sources.AnyPending(ctx, q, c.src.Name, sources.Scope{})
}

// NewConfiguredTenant returns the rows of tenant t of src, a source with a
// tenant column, over r: `syncer verify --tenant` reads them against the
// tenant's own account, and heals them for that tenant. Its progress and
// last run are kept apart from the whole source's (tenant.RunKey).
func NewConfiguredTenant(src *sources.Source, t tenant.Tenant, r Range) (*Configured, error) {
	if src.Tenant == "" {
		return nil, fmt.Errorf("source %s has no tenant column", src.Name)
	}
	if t.IsZero() {
		return nil, errors.New("no tenant given")
	}
	c, err := NewConfigured(src, r)
	if err != nil {
		return nil, err
	}
	c.tenant = t
	return c, nil
}

// scope is the rows c reads: the tenant's, or every row.
func (c *Configured) scope() sources.Scope { return sources.TenantOf(c.src, c.tenant.String()) }

// Tenant is the tenant whose rows c reads; the zero Tenant for every row.
func (c *Configured) Tenant() tenant.Tenant { return c.tenant }
