package rows

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/verify"
)

// resourceRows is the resources table as Rows: its keys are ids.
type resourceRows struct{}

var _ Rows = resourceRows{}

func (resourceRows) Scope() Scope    { return Scope{Source: ResourcesName} }
func (resourceRows) Kind() Kind      { return Resources }
func (resourceRows) KeyType() string { return "id" }
func (resourceRows) Tenanted() bool  { return false }

func (resourceRows) Destination() string { return ResourcesDestination }

// Tenants are none: resources has no tenant column.
func (resourceRows) Tenants(context.Context, database.Querier, tenant.Tenant, int) ([]tenant.Tenant, error) {
	return nil, nil
}

func (resourceRows) OfTenant(tenant.Tenant) (Rows, error) {
	return nil, &NoTenantsError{Source: ResourcesName}
}

// ParseKey takes a positive id in decimal.
func (resourceRows) ParseKey(text string) (string, error) {
	id, err := parseID(text)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(id, 10), nil
}

// badID wraps both errors a bad key is known by.
type badID struct{ text string }

func (e badID) Error() string {
	return fmt.Sprintf("%q is not an id of resources: %v", e.text, replays.ErrBadRange)
}
func (e badID) Unwrap() []error {
	return []error{replays.ErrBadRange, sources.ErrBadKey}
}

func parseID(text string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil || id <= 0 {
		return 0, badID{text}
	}
	return id, nil
}

func parseIDs(keys []string) ([]int64, error) {
	var ids []int64
	for _, k := range keys {
		id, err := parseID(k)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (resourceRows) Pending(ctx context.Context, q database.Querier, after string, limit int) ([]Item, error) {
	from := resources.Start
	if after != "" {
		id, err := parseID(after)
		if err != nil {
			return nil, err
		}
		from = id
	}
	p, err := resources.Pending(ctx, q, from, feed.Limits{Items: limit}.WithDefaults(), nil)
	if err != nil {
		return nil, err
	}
	out := make([]Item, len(p.Rows))
	for i, r := range p.Rows {
		out[i] = Item{Key: strconv.FormatInt(r.ID, 10), Version: r.Version, Deleted: r.Deleted}
	}
	return out, nil
}

func versionsOf(items []Item) (resources.Versions, error) {
	var v resources.Versions
	for _, it := range items {
		id, err := parseID(it.Key)
		if err != nil {
			return v, err
		}
		v.Add(id, it.Version)
	}
	return v, nil
}

func (resourceRows) Mark(ctx context.Context, db DB, items []Item) error {
	v, err := versionsOf(items)
	if err != nil {
		return err
	}
	_, err = resources.MarkSynced(ctx, db, v)
	return err
}

func (resourceRows) Fail(ctx context.Context, db DB, items []Item, errs []string) error {
	v, err := versionsOf(items)
	if err != nil {
		return err
	}
	_, err = resources.MarkFailed(ctx, db, v, errs)
	return err
}

// Retry takes ids.
func (resourceRows) Retry(ctx context.Context, db DB, keys []string) (int64, error) {
	ids, err := parseIDs(keys)
	if err != nil {
		return 0, err
	}
	return resources.RetryFailed(ctx, db, ids)
}

func (resourceRows) AnyPending(ctx context.Context, q database.Querier) (bool, error) {
	return resources.AnyPending(ctx, q)
}

// HeldFeed is the live sync's.
func (resourceRows) HeldFeed() string { return checkpoint.Live }

func (resourceRows) ReplayTable() replays.Table { return replays.Resources }

func (resourceRows) Verify(r verify.Range) (verify.Source, error) { return verify.NewResources(r) }
