package rows

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/verify"
)

// configuredRows is a configured source's rows, of one tenant when sc
// has one.
type configuredRows struct {
	src *sources.Source
	sc  sources.Scope
}

var _ Rows = configuredRows{}

func (c configuredRows) Scope() Scope {
	return Scope{Source: c.src.Name, Tenant: tenant.Tenant(c.sc.Tenant)}
}
func (configuredRows) Kind() Kind        { return Configured }
func (c configuredRows) KeyType() string { return c.src.KeyType }
func (c configuredRows) Tenanted() bool  { return c.src.Tenant != "" }

func (c configuredRows) Destination() string { return c.src.Destination }

func (c configuredRows) Tenants(ctx context.Context, q database.Querier, after tenant.Tenant, n int) ([]tenant.Tenant, error) {
	if !c.Tenanted() {
		return nil, nil
	}
	return sources.TableTenants(ctx, q, c.src, after, n)
}

func (c configuredRows) OfTenant(t tenant.Tenant) (Rows, error) { return OfSource(c.src, t) }

func (c configuredRows) ParseKey(text string) (string, error) { return c.src.NormalizeKey(text) }

func (c configuredRows) Pending(ctx context.Context, q database.Querier, after string, limit int) ([]Item, error) {
	lim := feed.Limits{Items: limit}.WithDefaults()
	var p sources.Page
	var err error
	if c.sc.Tenant != "" {
		p, err = sources.PendingKept(ctx, q, c.src, c.sc, after, after == "", lim)
	} else {
		p, err = sources.Pending(ctx, q, c.src, after, after == "", lim)
	}
	if err != nil {
		return nil, err
	}
	out := make([]Item, len(p.Rows))
	for i, r := range p.Rows {
		out[i] = Item{Key: r.Key, Version: r.Version, Deleted: r.Deleted}
	}
	return out, nil
}

func split(items []Item) (keys []string, versions []int64) {
	for _, it := range items {
		keys, versions = append(keys, it.Key), append(versions, it.Version)
	}
	return keys, versions
}

func (c configuredRows) Mark(ctx context.Context, db DB, items []Item) error {
	keys, versions := split(items)
	return c.send(ctx, db, func(b *pgx.Batch) error {
		return sources.QueueMarks(b, c.src, c.sc, keys, versions, nil, nil, nil)
	})
}

func (c configuredRows) Fail(ctx context.Context, db DB, items []Item, errs []string) error {
	keys, versions := split(items)
	return c.send(ctx, db, func(b *pgx.Batch) error {
		return sources.QueueMarks(b, c.src, c.sc, nil, nil, keys, versions, errs)
	})
}

func (c configuredRows) send(ctx context.Context, db DB, queue func(*pgx.Batch) error) error {
	b := &pgx.Batch{}
	if err := queue(b); err != nil {
		return err
	}
	return db.SendBatch(ctx, b).Close()
}

// Retry of a tenant's scope takes no keys: all of the tenant's failed
// keys go again, each for the tenant it failed at.
func (c configuredRows) Retry(ctx context.Context, db DB, keys []string) (int64, error) {
	switch {
	case len(keys) > 0 && c.sc.Tenant != "":
		return 0, fmt.Errorf("source %s tenant %s: a tenant's retry takes all its failed keys, not keys named", c.src.Name, c.sc.Tenant)
	case len(keys) > 0:
		return sources.RetryFailedKeys(ctx, db, c.src.Name, keys)
	}
	return sources.RetryFailed(ctx, db, c.src.Name, c.sc)
}

func (c configuredRows) AnyPending(ctx context.Context, q database.Querier) (bool, error) {
	return sources.AnyPending(ctx, q, c.src.Name, c.sc)
}

func (c configuredRows) HeldFeed() string { return HeldFeedOf(c.src.Name) }

func (c configuredRows) ReplayTable() replays.Table { return sources.ReplayTable(c.src) }

func (c configuredRows) Verify(r verify.Range) (verify.Source, error) {
	if c.sc.Tenant != "" {
		return verify.NewConfiguredTenant(c.src, tenant.Tenant(c.sc.Tenant), r)
	}
	return verify.NewConfigured(c.src, r)
}
