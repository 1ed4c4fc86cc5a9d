// Package status gathers what `syncer status` reports, from the database
// alone, so it tells the same truth whichever machine asks and whether or not
// a daemon runs there. It reads; it imports no runtime package (exporter,
// daemon), so reporting never drags the push path in.
package status

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/holds"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/unchanged"
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
	counts, err := resources.CountAll(ctx, pool)
	if err != nil {
		return nil, err
	}
	r.Total, r.Unsynced, r.Synced, r.Failed = counts.Total, counts.Unsynced, counts.Synced, counts.Failed
	r.Pending = counts.Unsynced - counts.Failed
	r.OldestUnsyncedAgeSeconds = counts.OldestUnsyncedAge.Seconds()
	if r.OutboxPending, err = outbox.Pending(ctx, pool); err != nil {
		return nil, err
	}
	stats, err := sources.Stats(ctx, pool)
	if err != nil {
		return nil, err
	}
	skips, err := unchanged.Count(ctx, pool)
	if err != nil {
		return nil, err
	}
	r.SkippedUnchanged = skips[ResourcesSource].Skipped
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
	r.ResourcesExported = len(stats) == 0 || counts.Total > 0 || liveRan
	r.Sources = make([]Source, 0, len(stats))
	r.Destinations = []Destination{}
	dests := map[string]int{}
	for _, st := range stats {
		if _, ok := dests[st.Destination]; !ok {
			dests[st.Destination] = len(r.Destinations)
			d, err := readDestination(ctx, pool, st.Destination)
			if err != nil {
				return nil, err
			}
			r.Destinations = append(r.Destinations, d)
		}
		d := &r.Destinations[dests[st.Destination]]
		src := Source{Name: st.Name, Table: st.Table, Destination: st.Destination, Pending: st.PendingKeys,
			Failed: st.FailedKeys, OldestPendingAgeSeconds: st.OldestPending.Seconds(), Snapshot: string(st.Snapshot),
			SnapshotPercent: st.SnapshotPercent(), Error: st.Error, Warning: st.Warning(),
			InFlight: inFlight[checkpoint.Source(st.Name)], SkippedUnchanged: skips[st.Name].Skipped}
		d.Sources = append(d.Sources, st.Name)
		d.InFlight += src.InFlight
		src.Stopped = SourceStopped(st.Error, d)
		r.Sources = append(r.Sources, src)
		r.Total += src.Pending + src.Failed
		r.Unsynced += src.Pending + src.Failed
		r.Failed += src.Failed
		r.Pending += src.Pending
		r.OldestUnsyncedAgeSeconds = max(r.OldestUnsyncedAgeSeconds, src.OldestPendingAgeSeconds)
	}
	slices.SortFunc(r.Destinations, func(a, b Destination) int { return cmp.Compare(a.Name, b.Name) })

	schema, err := database.CurrentSchema(ctx, pool)
	if err != nil {
		return nil, err
	}
	h, held, err := locks.HolderOf(ctx, pool, locks.ExportKey(schema, jobs.Resources))
	if err != nil {
		return nil, err
	}
	if held {
		r.Lock = Lock{Held: true, PID: h.PID, ApplicationName: h.ApplicationName, ClientAddr: h.ClientAddr,
			Host: h.Host, Process: h.Process, Role: h.Role}
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
	done := map[string]int64{}
	for _, cp := range cps {
		done[cp.Name] = cp.RowsDone + cp.RowsFailed
		if !shown[cp.Name] {
			continue
		}
		r.Checkpoints = append(r.Checkpoints, Checkpoint{
			Name: cp.Name, LastID: cp.LastID, RowsDone: cp.RowsDone, RowsFailed: cp.RowsFailed,
			BatchesDone: cp.BatchesDone, InFlight: cp.InFlight, UpdatedAt: cp.UpdatedAt,
		})
	}
	var ofSources map[int64]sources.ReplayInfo
	for _, rp := range recent {
		d := done[checkpoint.Replay(rp.ID)]
		if rp.Source != "" {
			if ofSources == nil {
				if ofSources, err = sources.Replays(ctx, pool); err != nil {
					return nil, err
				}
			}
			info := ofSources[rp.ID]
			d = max(info.KeysLogged-info.Unsent, 0)
		}
		r.Replays = append(r.Replays, Replay{ID: rp.ID, Source: rp.Source, State: rp.State, TotalRows: rp.TotalRows,
			RowsDone: d, Percent: rp.Percent(d), CreatedAt: rp.CreatedAt})
	}

	if r.RecentFailures, err = recentFailures(ctx, pool, c.RecentFailures, r.ResourcesExported, len(stats) > 0); err != nil {
		return nil, err
	}

	if r.HeldKeys, err = heldKeys(ctx, pool, c.RecentFailures, r.Sources); err != nil {
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

// recentFailures merges the latest failures of resources and of every
// source, latest first.
func recentFailures(ctx context.Context, pool *pgxpool.Pool, limit int, ofResources, ofSources bool) ([]Failure, error) {
	out := []Failure{}
	if ofResources {
		fails, err := resources.RecentFailures(ctx, pool, limit)
		if err != nil {
			return nil, err
		}
		for _, f := range fails {
			out = append(out, Failure{Source: ResourcesSource, ID: strconv.FormatInt(f.ID, 10), Version: f.Version,
				FailedAt: f.FailedAt, Error: f.Error})
		}
	}
	if ofSources {
		fails, err := sources.AllRecentFailures(ctx, pool, limit)
		if err != nil {
			return nil, err
		}
		for _, f := range fails {
			out = append(out, Failure{Source: f.Source, ID: f.Key, Version: f.Version, Destination: f.Destination,
				FailedAt: f.FailedAt, Error: f.Error})
		}
	}
	slices.SortStableFunc(out, func(a, b Failure) int { return b.FailedAt.Compare(a.FailedAt) })
	return out[:min(len(out), limit)], nil
}
