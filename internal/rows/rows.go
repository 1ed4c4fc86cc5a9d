// Package rows is the one seam for a source's rows above the pipeline:
// what a command, the console, status or verify does to the rows of
// resources or of a configured source (retry its failed keys, release its
// held keys, replay it, verify it, parse a key typed by a person) goes
// through a Rows, whose kind is decided once, by Open, from the source's
// name. Each Rows is bound to its Scope (the source, and the tenant when
// there is one): none of its methods can be called on another tenant's
// rows, nor on the whole source by forgetting the tenant.
//
// The exporter's feeds (the pipeline) read and mark rows through the
// typed calls of internal/resources and internal/sources, which keep
// their batches free of the seam's conversions; this package is for the
// rest. To add a kind of source, implement Rows and teach KindOf and Open
// about it; rowstest's suite says what the kind must do.
package rows

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/verify"
)

// Scope names the rows a Rows acts on: a source's, and of those one
// tenant's when Tenant is set (a source with a tenant column).
type Scope struct {
	Source string
	Tenant tenant.Tenant
}

// Kind is a kind of source.
type Kind int

const (
	// Configured is an application's table, installed from the
	// configuration (internal/sources).
	Configured Kind = iota
	// Resources is syncer's own resources table (internal/resources).
	Resources
)

// KindOf is the kind of the source named name: the one place that tells
// resources from a configured source by its name. It reads nothing, for
// the checks of a command's flags; Open is the kind with the source.
func KindOf(name string) Kind {
	if name == jobs.Resources {
		return Resources
	}
	return Configured
}

// HeldFeedOf is the feed the held keys of the source named are kept under
// (internal/holds): Rows.HeldFeed, read from the name alone.
func HeldFeedOf(name string) string {
	if KindOf(name) == Resources {
		return resourceRows{}.HeldFeed()
	}
	return checkpoint.Source(name)
}

// ReplayUnit is what a replay of the source named counts, from the name
// alone (a form shown before any plan): replays.UnitRows for resources,
// replays.UnitKeys for a configured source; a plan says it too (Plan.Unit).
func ReplayUnit(name string) string {
	if KindOf(name) == Resources {
		return replays.UnitRows
	}
	return replays.UnitKeys
}

// ResourcesName is the name of the resources source, as commands and
// status show it.
const ResourcesName = jobs.Resources

// Item is a pending row as the seam gives it: its key in text form, its
// version, and whether it is a tombstone.
type Item struct {
	Key     string
	Version int64
	Deleted bool
}

// DB is what the writes need: a Querier that also sends batches (a
// mark's statements go in one). pgx.Tx and *pgxpool.Pool fit.
type DB interface {
	database.Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Rows is a source's rows within its Scope.
type Rows interface {
	// Scope is the rows acted on.
	Scope() Scope
	// Kind is the source's kind.
	Kind() Kind
	// Tenanted reports whether the source has a tenant column: its rows
	// are each a tenant's.
	Tenanted() bool
	// Destination is the destination the source's rows are sent to, as
	// installed: ResourcesDestination for resources.
	Destination() string
	// Tenants returns up to n tenants with rows in the source's table, in
	// order after after (the zero Tenant from the first); none of a
	// source without a tenant column.
	Tenants(ctx context.Context, q database.Querier, after tenant.Tenant, n int) ([]tenant.Tenant, error)
	// OfTenant is the rows of tenant t of the same source: a
	// *NoTenantsError for a source without a tenant column.
	OfTenant(t tenant.Tenant) (Rows, error)
	// KeyType says what a key of the source is, for messages: "id" for
	// resources, the key's type for a configured source.
	KeyType() string
	// ParseKey returns text, a key typed by a person, in the text form
	// the source records it under, or an error wrapping sources.ErrBadKey
	// (for resources, replays.ErrBadRange too).
	ParseKey(text string) (string, error)
	// Pending returns up to limit pending items after the key after (""
	// from the first), in key order.
	Pending(ctx context.Context, q database.Querier, after string, limit int) ([]Item, error)
	// Mark records items as accepted at their versions.
	Mark(ctx context.Context, db DB, items []Item) error
	// Fail records items as rejected at their versions, with errs (one
	// per item).
	Fail(ctx context.Context, db DB, items []Item, errs []string) error
	// Retry makes the failed keys named (text form, ParseKey'd) eligible
	// again, all of them when keys is nil, and returns how many. Run it in
	// a transaction; wake the daemons in the same one.
	Retry(ctx context.Context, db DB, keys []string) (int64, error)
	// Counts are the scope's rows by state, exact (AllCounts reads every
	// source's at once).
	Counts(ctx context.Context, q database.Querier) (Counts, error)
	// AnyPending reports whether the source has rows still to export.
	AnyPending(ctx context.Context, q database.Querier) (bool, error)
	// HeldFeed is the feed the source's held keys are kept under
	// (internal/holds).
	HeldFeed() string
	// ReplayTable is the source as a replay's table.
	ReplayTable() replays.Table
	// Verify is the scope's rows over r as verify reads them.
	Verify(r verify.Range) (verify.Source, error)
}

// ErrUnknown is wrapped by the error of a source that is not installed,
// or of a tenant's scope of a source without tenants.
var ErrUnknown = errors.New("not installed")

// NoSourceError is returned for a source that is not installed.
type NoSourceError struct {
	Name string
	// Installed names the sources that are, when they were read.
	Installed []string
}

func (e *NoSourceError) Error() string {
	return fmt.Sprintf("no source %s is installed (see syncer status)", e.Name)
}

// Unwrap makes it an ErrUnknown.
func (e *NoSourceError) Unwrap() error { return ErrUnknown }

// NoTenantsError is returned for a tenant's scope of a source without a
// tenant column (resources, or a configured source without one).
type NoTenantsError struct{ Source string }

func (e *NoTenantsError) Error() string {
	return fmt.Sprintf("source %s has no tenants (no tenant column)", e.Source)
}

// Unwrap makes it an ErrUnknown.
func (e *NoTenantsError) Unwrap() error { return ErrUnknown }

// Open returns the rows of sc, deciding the source's kind once: resources,
// or an installed configured source (a *NoSourceError otherwise). A
// tenant's scope of a source without a tenant column is a
// *NoTenantsError. Whether the tenant has rows is the caller's to check
// (operator.CheckSourceTenant): a pause ahead of a tenant's first row is
// fine.
func Open(ctx context.Context, q database.Querier, sc Scope) (Rows, error) {
	if KindOf(sc.Source) == Resources {
		if !sc.Tenant.IsZero() {
			return nil, &NoTenantsError{Source: sc.Source}
		}
		return resourceRows{}, nil
	}
	all, err := sources.Load(ctx, q)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(all, func(s *sources.Source) bool { return s.Name == sc.Source })
	if i < 0 {
		e := &NoSourceError{Name: sc.Source}
		for _, s := range all {
			e.Installed = append(e.Installed, s.Name)
		}
		return nil, e
	}
	return OfSource(all[i], sc.Tenant)
}

// OfSource is the rows of src, a configured source already loaded, of
// t (the zero Tenant for every row).
func OfSource(src *sources.Source, t tenant.Tenant) (Rows, error) {
	if !t.IsZero() && src.Tenant == "" {
		return nil, &NoTenantsError{Source: src.Name}
	}
	return configuredRows{src: src, sc: sources.TenantOf(src, t.String())}, nil
}
