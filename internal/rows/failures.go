package rows

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Failure is a key the third party rejected, of either kind of source.
type Failure struct {
	// Source is the source's name (ResourcesName for resources).
	Source string
	// Key is the key in text form: an id of resources, a configured
	// source's key.
	Key     string
	Version int64
	// Destination and Tenant are a configured source's; empty for
	// resources.
	Destination string
	Tenant      string
	FailedAt    time.Time
	Error       string
}

// RecentFailures returns up to limit of the latest failures, latest
// first, of resources when ofResources and of every configured source
// when ofSources. It reads across sources rather than through a Rows:
// one query per kind, however many sources there are, where a Rows per
// source would cost status a round trip per source on every pass.
func RecentFailures(ctx context.Context, q database.Querier, limit int, ofResources, ofSources bool) ([]Failure, error) {
	out := []Failure{}
	if ofResources {
		fails, err := resources.RecentFailures(ctx, q, limit)
		if err != nil {
			return nil, err
		}
		for _, f := range fails {
			out = append(out, Failure{Source: ResourcesName, Key: strconv.FormatInt(f.ID, 10), Version: f.Version,
				FailedAt: f.FailedAt, Error: f.Error})
		}
	}
	if ofSources {
		fails, err := sources.AllRecentFailures(ctx, q, limit)
		if err != nil {
			return nil, err
		}
		for _, f := range fails {
			out = append(out, Failure{Source: f.Source, Key: f.Key, Version: f.Version, Destination: f.Destination,
				Tenant: f.Tenant, FailedAt: f.FailedAt, Error: f.Error})
		}
	}
	slices.SortStableFunc(out, func(a, b Failure) int { return b.FailedAt.Compare(a.FailedAt) })
	return out[:min(len(out), limit)], nil
}
