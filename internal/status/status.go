// Package status gathers what `syncer status` reports, from the database
// alone, so it tells the same truth whichever machine asks and whether or not
// a daemon runs there. It reads; it imports no runtime package (exporter,
// daemon), so reporting never drags the push path in.
package status

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/holds"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/unchanged"
	"github.com/syncer-dev/syncer/internal/verify"
)

// Defaults for Config.
const (
	RecentReplaysDefault  = 5
	RecentFailuresDefault = 10
)

// Config says how much history the report holds. A nil *Config is a Config
// of defaults.
type Config struct {
	// RecentReplays is how many finished replays are shown besides every
	// unfinished one. Defaults to RecentReplaysDefault.
	RecentReplays int
	// RecentFailures is how many failed rows are shown, latest first.
	// Defaults to RecentFailuresDefault.
	RecentFailures int
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.RecentReplays = cmp.Or(out.RecentReplays, RecentReplaysDefault)
	out.RecentFailures = cmp.Or(out.RecentFailures, RecentFailuresDefault)
	return out
}

func (c *Config) validate() error {
	switch {
	case c == nil:
		return nil
	case c.RecentReplays < 0:
		return fmt.Errorf("status: config: RecentReplays must not be negative, got %d", c.RecentReplays)
	case c.RecentFailures < 0:
		return fmt.Errorf("status: config: RecentFailures must not be negative, got %d", c.RecentFailures)
	}
	return nil
}

// Gather builds the report. A nil cfg is a Config of defaults.
func Gather(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	r := &Report{Jobs: map[string]int{}, Breaker: Breaker{State: "closed"}}
	// Every source's counts through the seam, exact: the configured
	// sources by name, then resources.
	counts, err := rows.AllCounts(ctx, pool, true)
	if err != nil {
		return nil, err
	}
	if r.OutboxPending, err = outbox.Pending(ctx, pool); err != nil {
		return nil, err
	}
	skips, err := unchanged.Count(ctx, pool)
	if err != nil {
		return nil, err
	}
	for _, sk := range skips {
		r.SkippedUnchanged += sk.Skipped
	}
	cps, err := checkpoint.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	inFlight := map[string]int{}
	liveRan := false
	for _, cp := range cps {
		inFlight[cp.Name] = cp.InFlight
		liveRan = liveRan || cp.Name == checkpoint.Live
	}
	// Every source is one entry, built from its counts; all that follows
	// reads the entries alike. Resources comes last, after the configured
	// sources by name, as the console has always listed it, and only
	// while it is exported here.
	r.Sources = make([]Source, 0, len(counts))
	configured := len(counts) > 1
	for _, c := range counts {
		if c.Kind == rows.Resources {
			r.ResourcesExported = !configured || c.Total > 0 || liveRan
			if !r.ResourcesExported {
				continue
			}
		}
		r.Sources = append(r.Sources, sourceOf(&c, inFlight[c.Feed], skips[c.Source].Skipped))
	}
	last, err := verify.LastRuns(ctx, pool)
	if err != nil {
		return nil, err
	}
	for i := range r.Sources {
		r.Sources[i].Verify = last[r.Sources[i].Name]
		r.Sources[i].VerifyTenants = tenantVerifies(last, r.Sources[i].Name)
	}
	if err := r.readTenants(ctx, pool); err != nil {
		return nil, err
	}
	schema, err := database.CurrentSchema(ctx, pool)
	if err != nil {
		return nil, err
	}
	if err := r.readSources(ctx, pool, schema); err != nil {
		return nil, err
	}

	if err := readState(ctx, pool, r); err != nil {
		return nil, err
	}

	recent, err := replays.Recent(ctx, pool, c.RecentReplays)
	if err != nil {
		return nil, err
	}
	shown := map[string]bool{checkpoint.Live: true}
	for _, rp := range recent {
		shown[checkpoint.Replay(rp.ID)] = true
	}
	for _, cp := range cps {
		if !shown[cp.Name] {
			continue
		}
		r.Checkpoints = append(r.Checkpoints, Checkpoint{
			Name: cp.Name, LastID: cp.LastID, RowsDone: cp.RowsDone, RowsFailed: cp.RowsFailed,
			BatchesDone: cp.BatchesDone, InFlight: cp.InFlight, UpdatedAt: cp.UpdatedAt,
		})
	}
	// The replay model's one progress reader, which replay --list and
	// --wait use too.
	progress, err := replays.ProgressOf(ctx, pool, sources.ReplaysUnsent, recent)
	if err != nil {
		return nil, err
	}
	for _, p := range progress {
		r.Replays = append(r.Replays, Replay{ID: p.ID, Source: p.Source, Tenant: p.Range.Tenant.String(), State: p.ShownState(), TotalRows: p.TotalRows,
			RowsDone: p.Sent, Percent: p.Percent(), CreatedAt: p.CreatedAt})
	}

	if r.RecentFailures, err = recentFailures(ctx, pool, c.RecentFailures, r.ResourcesExported, configured); err != nil {
		return nil, err
	}

	if r.HeldKeys, err = heldKeys(ctx, pool, c.RecentFailures, r.Sources); err != nil {
		return nil, err
	}
	if r.Sessions, err = readSessions(ctx, pool, os.Getpid()); err != nil {
		return nil, err
	}

	jobCounts, err := jobs.Counts(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	for _, c := range jobCounts {
		switch c.State {
		case "completed", "discarded", "cancelled":
		default:
			r.Jobs[c.Kind+":"+c.State] = int(c.N)
		}
	}
	return r, nil
}

// sourceOf is the entry of a source counted c, with inFlight versions
// on their way and skipped rows sent unchanged.
func sourceOf(c *rows.Counts, inFlight int, skipped int64) Source {
	s := Source{Name: c.Source, Table: c.Table, Destination: c.Destination, Total: c.Total, Synced: c.Synced,
		Pending: c.Pending, Failed: c.Failed, OldestPendingAgeSeconds: c.OldestPending.Seconds(), SnapshotPercent: -1,
		InFlight: inFlight, SkippedUnchanged: skipped}
	if st := c.State; st != nil {
		s.Snapshot, s.SnapshotPercent, s.Error, s.Warning = string(st.Snapshot), st.SnapshotPercent(), st.Error, st.Warning()
	}
	return s
}

// readSources completes every entry of r.Sources alike: its destination's
// facts (each destination read once, listed by name), why it is stopped,
// and who holds its export lock; then the contract's totals, summed over
// the entries (sum), and the top-level lock, resources' entry's.
func (r *Report) readSources(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	r.Destinations = []Destination{}
	dests := map[string]int{}
	for i := range r.Sources {
		src := &r.Sources[i]
		if _, ok := dests[src.Destination]; !ok {
			dests[src.Destination] = len(r.Destinations)
			d, err := readDestination(ctx, pool, src.Destination)
			if err != nil {
				return err
			}
			r.Destinations = append(r.Destinations, d)
		}
		d := &r.Destinations[dests[src.Destination]]
		d.Sources = append(d.Sources, src.Name)
		d.InFlight += src.InFlight
		src.Stopped = SourceStopped(src.Error, d)
		h, held, err := locks.HolderOf(ctx, pool, locks.ExportKey(schema, src.Name))
		if err != nil {
			return err
		}
		if held {
			src.Lock = Lock{Held: true, PID: h.PID, ApplicationName: h.ApplicationName, ClientAddr: h.ClientAddr,
				Host: h.Host, Process: h.Process, Role: h.Role}
		}
		if src.Name == ResourcesSource {
			r.Lock = src.Lock
		}
	}
	slices.SortFunc(r.Destinations, func(a, b Destination) int { return cmp.Compare(a.Name, b.Name) })
	r.sum()
	return nil
}

// sum sets the contract's totals from the sources' entries: a source's
// unsynced rows are its pending and failed ones.
func (r *Report) sum() {
	for _, s := range r.Sources {
		r.Total += s.Total
		r.Synced += s.Synced
		r.Unsynced += s.Pending + s.Failed
		r.Pending += s.Pending
		r.Failed += s.Failed
		r.OldestUnsyncedAgeSeconds = max(r.OldestUnsyncedAgeSeconds, s.OldestPendingAgeSeconds)
	}
}

// heldKeys lists up to limit held keys, the longest held first, with
// their sources' destinations.
func heldKeys(ctx context.Context, pool *pgxpool.Pool, limit int, srcs []Source) ([]HeldKey, error) {
	hs, err := holds.List(ctx, pool, limit)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	dest := map[string]string{}
	for _, s := range srcs {
		dest[s.Name] = s.Destination
	}
	now := time.Now()
	out := make([]HeldKey, 0, len(hs))
	for _, h := range hs {
		o := checkpoint.OwnerOf(h.Feed)
		src := ResourcesSource
		if o.Kind == checkpoint.KindSource {
			src = o.Source
		}
		state := HeldRetrying
		if h.Holding(now) {
			state = HeldHolding
		}
		out = append(out, HeldKey{Source: src, ID: h.Key, Version: h.Version, Destination: dest[src], State: state,
			Reason: h.Reason, Tries: h.Tries, Since: h.Since, NextTry: h.Next})
	}
	return out, nil
}

// recentFailures is the latest failures of resources and of every
// source, latest first, read through the seam (rows.RecentFailures: one
// query per kind).
func recentFailures(ctx context.Context, pool *pgxpool.Pool, limit int, ofResources, ofSources bool) ([]Failure, error) {
	fails, err := rows.RecentFailures(ctx, pool, limit, ofResources, ofSources)
	if err != nil {
		return nil, err
	}
	out := make([]Failure, 0, len(fails))
	for _, f := range fails {
		out = append(out, Failure{Source: f.Source, ID: f.Key, Version: f.Version, Destination: f.Destination,
			Tenant: f.Tenant, FailedAt: f.FailedAt, Error: f.Error})
	}
	return out, nil
}

// tenantVerifies are source's tenants' last verifies, in the tenants'
// order.
func tenantVerifies(last map[string]*verify.Last, source string) []TenantVerify {
	var out []TenantVerify
	for key, l := range last {
		if s, t, ok := tenant.SplitRunKey(key); ok && s == source {
			out = append(out, TenantVerify{Tenant: t.String(), Last: l})
		}
	}
	slices.SortFunc(out, func(a, b TenantVerify) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}
