package exporter

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
)

// The feed family. Every source exported here, resources and each
// configured source, is one exported: it owns its job's argument (its
// name), its lock key, its checkpoint and key salt (its live target), the
// recorded batches it resends, what it does beside its pending rows (a
// configured source's snapshot, resources' replay ranges; a configured
// source's replays are logged by its snapshot's code), and whether it has
// work. The rest is written once for all of them: the one worker
// (worker.go), its lock and its destination's turn (turns.go), the resend
// of recorded batches (resume.go), the pipeline, and lingering
// (linger.go), which is the one hot path that finds new rows.

// Source is one source this exporter exports, and its destination. Build
// it with Resources or Configured: the constructor is the one place a
// source's kind is decided (docs/design.md, "One constructor decides a
// feed's kind"); everything above the pipeline reads only its name.
type Source struct {
	// name is the source's name: its job's argument, its lock, its
	// series. Set by the constructor.
	name string
	// open builds the source as the worker runs it. Set by the
	// constructor, with the kind's own settings in its closure.
	open func(s Source, e *Exporter) exported
	// settings are the kind's own settings (a configured source's
	// resolved table), compared on a reload (sameSource). Set by the
	// constructor.
	settings any
	// Destination is the source's destination's deliverer. Required.
	Destination Destination
	// DestinationName names the destination in metrics, log lines and its
	// lock. Defaults to what the constructor set: the configured source's
	// destination, or metrics.DefaultDestination for resources.
	DestinationName string
	// BatchSize is the most items a batch holds. Defaults to
	// Config.BatchSize.
	BatchSize int
	// BodyTag names how the destination renders a body (its URL, format
	// and settings): a version whose body, under this tag, is the one the
	// third party last accepted for its key is settled as skipped without
	// a request (unchanged.go). Empty: every version is sent, and no
	// digest is kept.
	BodyTag string
	// Tenants gives each tenant its own destination, for a source with a
	// tenant column: it is then exported as its lanes (lanes.go), and
	// every batch goes to Tenants.For(its tenant), never to Destination,
	// which names the destination and holds its limits. Nil sends every
	// tenant to Destination, all sharing its state (one rate limit, one
	// breaker, one refusal, kept per process). Unused for a source without
	// a tenant column.
	Tenants TenantDestinations
}

// Resources is the source that is the resources table (docs/protocol.md
// section 1, with its built-in triggers), exported to dest.
func Resources(dest Destination) Source {
	return Source{name: jobs.Resources, Destination: dest, DestinationName: metrics.DefaultDestination,
		open: func(s Source, e *Exporter) exported { return &resourcesSource{Source: s, e: e} }}
}

// Configured is configured source src (sources.Resolve), exported to dest.
func Configured(src *sources.Source, dest Destination) Source {
	return Source{name: src.Name, Destination: dest, DestinationName: src.Destination, settings: src,
		open: func(s Source, e *Exporter) exported { return &configuredSource{Source: s, src: src, e: e} }}
}

// Name is the source's name: its job's argument, its wake-ups, its lock.
func (s Source) Name() string { return s.name }

// exported is one source as the worker runs it (see the top of this file).
type exported interface {
	// base is what every source has: name, destination, limits.
	base() *Source
	// check runs before the lock is taken: a configured source stops with
	// sources.ErrSchemaChanged when its table no longer matches.
	check(ctx context.Context) error
	// live is the source's feed of pending rows and its destination.
	live() target
	// owns reports whether the recorded batches of the named checkpoint
	// are this source's to resend: its live feed's, and for resources
	// those of its replays.
	owns(checkpoint string) bool
	// drain returns the job's drain and poll (lingerFeed's), which pass
	// over the source's rows in its destination's turn and do the
	// source's side work (a snapshot, replays) between passes.
	drain(e *Exporter, r *run) (drain func(context.Context) (int, error), poll func(context.Context, bool) (int, error))
	// ended records how an execution ended where operators read it (a
	// configured source's last error); err is nil or errMore after work
	// done.
	ended(ctx context.Context, e *Exporter, err error)
}

// family builds the sources from their configuration.
func (e *Exporter) family(list []Source) (map[string]exported, error) {
	out := make(map[string]exported, len(list))
	for i, s := range list {
		switch {
		case s.open == nil:
			return nil, fmt.Errorf("exporter: config: Sources[%d]: build it with Resources or Configured", i)
		case s.Destination == nil:
			return nil, fmt.Errorf("exporter: config: Sources[%d]: Destination is required", i)
		}
		s.DestinationName = cmp.Or(s.DestinationName, metrics.DefaultDestination)
		if _, dup := out[s.Name()]; dup {
			return nil, fmt.Errorf("exporter: config: Sources[%d]: source %s is listed twice", i, s.Name())
		}
		if src, ok := s.settings.(*sources.Source); ok && src.Tenant != "" {
			lanes, err := e.laneSources(s, src)
			if err != nil {
				return nil, err
			}
			for _, l := range lanes {
				out[l.base().Name()] = l
			}
			continue
		}
		out[s.Name()] = s.open(s, e)
	}
	return out, nil
}

// Exported names the sources this exporter exports, in order.
func (e *Exporter) Exported() []string {
	srcs := e.sourcesNow()
	names := make([]string, 0, len(srcs))
	for n := range srcs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// WithWork returns those of names (sources exported here) that have work:
// rows or keys pending, a snapshot or a replay unfinished. Each source's
// owner answers for its own.
func (e *Exporter) WithWork(ctx context.Context, q database.Querier, names []string) ([]string, error) {
	var out, configured, lanes []string
	for _, n := range names {
		if _, _, ok := jobs.LaneOf(n); ok {
			lanes = append(lanes, n)
			continue
		}
		if n != jobs.Resources {
			configured = append(configured, n)
			continue
		}
		pending, err := resources.AnyPending(ctx, q)
		if err == nil && !pending {
			pending, err = replays.AnyWaiting(ctx, q)
		}
		if err != nil {
			return nil, err
		}
		if pending {
			out = append(out, n)
		}
	}
	if len(configured) > 0 {
		more, err := sources.WithWork(ctx, q, configured)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	if len(lanes) > 0 {
		more, err := lanesWithWork(ctx, q, lanes)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	return out, nil
}

// Held returns those of names whose export lock a session holds with a
// live lease: a holder whose lease ran out does not count, since a job
// must run to take its lock over.
func (e *Exporter) Held(ctx context.Context, q database.Querier, names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		held, err := locks.HeldLive(ctx, q, locks.ExportKey(e.cfg.Schema, n))
		if err != nil {
			return nil, err
		}
		if held {
			out = append(out, n)
		}
	}
	return out, nil
}

var _ outbox.Exporter = (*Exporter)(nil)

// othersWait reports whether another source of s's destination has work
// and no job lingering here: its job snoozes on the destination's lock
// (another daemon's, or one with no linger slot), so s's job ends and lets
// it in, as a job that drained used to.
func (e *Exporter) othersWait(ctx context.Context, s *Source) (bool, error) {
	var others []string
	for name, o := range e.sourcesNow() {
		if _, _, lane := jobs.LaneOf(name); lane {
			continue // a lane takes no turn at the destination's lock
		}
		if name != s.Name() && o.base().DestinationName == s.DestinationName && !e.Active(name) {
			others = append(others, name)
		}
	}
	if len(others) == 0 {
		return false, nil
	}
	names, err := e.WithWork(ctx, e.pool, others)
	return len(names) > 0, err
}
