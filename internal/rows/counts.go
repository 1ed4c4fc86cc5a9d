package rows

import (
	"context"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
)

// ResourcesDestination is the destination of resources: the one the
// SYNCER_THIRDPARTY_* settings build.
const ResourcesDestination = metrics.DefaultDestination

// Counts are a scope's rows by state, alike for every kind, as status,
// the gauges and the console show them.
type Counts struct {
	Source string
	Kind   Kind
	// Destination is where the source's rows are sent:
	// ResourcesDestination for resources.
	Destination string
	// Table is the table the rows are in.
	Table string
	// Feed is the checkpoint of the source's live export: its versions in
	// flight and its held keys are kept under it (HeldFeedOf).
	Feed string
	// Pending are the keys waiting to be sent, Failed those whose current
	// version was rejected (for resources, rows and tombstones both).
	Pending, Failed int64
	// Total is every row counted and Synced those sent: for resources
	// when counted exactly; a configured source counts only its keys
	// still to send, so its Total is Pending+Failed and Synced is 0.
	Total, Synced int64
	// TombstonesPending and TombstonesFailed are the tombstones among
	// Pending and Failed (resources keeps its deletes apart).
	TombstonesPending, TombstonesFailed int64
	// OldestPending is the age of the oldest pending change.
	OldestPending time.Duration
	// State is a configured source's own state (its snapshot, its error,
	// what its triggers do not capture); nil for resources and for a
	// tenant's scope.
	State *sources.Stat
}

// AllCounts returns every source's counts: the configured sources
// installed, by name, then resources. It reads across sources rather
// than through a Rows each, one statement per kind however many sources
// there are, since status and every daemon's gauges ask for all of them.
// Exact counts read the whole resources table, for a command; otherwise
// resources is counted from its partial indexes, up to a cap, at a cost
// that does not grow with the table (resources.Gauges), for what runs
// every few seconds. Configured sources count up to sources.StatsCountCap
// keys either way.
func AllCounts(ctx context.Context, db database.DB, exact bool) ([]Counts, error) {
	stats, err := sources.Stats(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make([]Counts, 0, len(stats)+1)
	for i := range stats {
		out = append(out, statCounts(&stats[i]))
	}
	res, err := resourceCounts(ctx, db, exact)
	if err != nil {
		return nil, err
	}
	return append(out, res), nil
}

func statCounts(st *sources.Stat) Counts {
	return Counts{Source: st.Name, Kind: Configured, Destination: st.Destination, Table: st.Table, Feed: HeldFeedOf(st.Name),
		Pending: st.PendingKeys, Failed: st.FailedKeys, Total: st.PendingKeys + st.FailedKeys,
		OldestPending: st.OldestPending, State: st}
}

func resourceCounts(ctx context.Context, db database.DB, exact bool) (Counts, error) {
	if exact {
		return resourceRows{}.Counts(ctx, db)
	}
	c := Counts{Source: ResourcesName, Kind: Resources, Destination: ResourcesDestination, Table: ResourcesName,
		Feed: resourceRows{}.HeldFeed()}
	g, err := resources.Gauges(ctx, db)
	c.Pending, c.Failed = g.Pending+g.TombstonesPending, g.Failed+g.TombstonesFailed
	c.TombstonesPending, c.TombstonesFailed = g.TombstonesPending, g.TombstonesFailed
	c.Total, c.OldestPending = g.Total, g.OldestPendingAge
	return c, err
}

// Counts of resources are exact: they read the whole table.
func (resourceRows) Counts(ctx context.Context, q database.Querier) (Counts, error) {
	c := Counts{Source: ResourcesName, Kind: Resources, Destination: ResourcesDestination, Table: ResourcesName,
		Feed: resourceRows{}.HeldFeed()}
	n, err := resources.CountAll(ctx, q)
	c.Pending, c.Failed = n.Unsynced-n.Failed, n.Failed
	c.TombstonesPending, c.TombstonesFailed = n.TombstonesPending, n.TombstonesFailed
	c.Total, c.Synced, c.OldestPending = n.Total, n.Synced, n.OldestUnsyncedAge
	return c, err
}

// Counts of a tenant's scope are the tenant's keys; of the whole source,
// the source's entry of AllCounts.
func (c configuredRows) Counts(ctx context.Context, q database.Querier) (Counts, error) {
	if c.sc.Tenant != "" {
		b, err := sources.TenantsBacklog(ctx, q, c.src.Name, 1, c.sc.Tenant, nil)
		if err != nil {
			return Counts{}, err
		}
		out := Counts{Source: c.src.Name, Kind: Configured, Destination: c.src.Destination,
			Table: c.src.Schema + "." + c.src.Table, Feed: c.HeldFeed()}
		if r := b.Rows[c.sc.Tenant]; r != nil {
			out.Pending, out.Failed, out.Total, out.OldestPending = r.Pending, r.Failed, r.Pending+r.Failed, r.OldestPending
		}
		return out, nil
	}
	stats, err := sources.Stats(ctx, q)
	if err != nil {
		return Counts{}, err
	}
	i := slices.IndexFunc(stats, func(st sources.Stat) bool { return st.Name == c.src.Name })
	if i < 0 {
		return Counts{}, &NoSourceError{Name: c.src.Name}
	}
	return statCounts(&stats[i]), nil
}
