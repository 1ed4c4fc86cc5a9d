// Package operator holds what a person does to a running syncer, from the
// command line or the console alike: retry a source's failed keys, pause,
// resume or probe a destination, start or cancel a replay of a source. Each
// action asks the packages that own the tables (sources, replays, outbox,
// breakerstore); none writes SQL of its own, so the two front ends cannot
// drift apart.
package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/holds"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/presence"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Who asked, as status shows it.
const (
	ByCommandLine = "command line"
	ByConsole     = "console"
)

// ErrUnknown is wrapped by the errors of an action on a source or a
// destination that is not installed.
var ErrUnknown = errors.New("not installed")

// NoSourceError is returned for a source that is not installed.
type NoSourceError struct{ Name string }

func (e *NoSourceError) Error() string {
	return fmt.Sprintf("no source %s is installed (see syncer status)", e.Name)
}

// Unwrap makes it an ErrUnknown.
func (e *NoSourceError) Unwrap() error { return ErrUnknown }

// RetrySource makes a source's failed keys eligible again, all of them or
// those named (each in its text form), and wakes the daemons in the same
// transaction. It returns how many keys are pending again.
func RetrySource(ctx context.Context, pool *pgxpool.Pool, source string, keys []string) (n int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		known, err := sources.IsInstalled(ctx, tx, source)
		if err != nil {
			return err
		}
		if !known {
			return &NoSourceError{Name: source}
		}
		if len(keys) > 0 {
			n, err = sources.RetryFailedKeys(ctx, tx, source, keys)
		} else {
			n, err = sources.RetryFailed(ctx, tx, source)
		}
		if err != nil || n == 0 {
			return err
		}
		return outbox.Wake(ctx, tx, source)
	})
	return n, err
}

// ReleaseHeld makes the held keys of a source (or of resources, as
// jobs.Resources) go at once, all of them when keys is nil, and wakes its
// daemon: what retry-failed does to a key the third party keeps answering
// transiently (docs/operations.md). It returns how many it released.
func ReleaseHeld(ctx context.Context, pool *pgxpool.Pool, source string, keys []string) (n int64, err error) {
	feed := checkpoint.Live
	if source != jobs.Resources {
		feed = checkpoint.Source(source)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if n, err = holds.Clear(ctx, tx, feed, keys); err != nil || n == 0 {
			return err
		}
		return outbox.Wake(ctx, tx, source)
	})
	return n, err
}

// Destinations returns the names of the installed sources' destinations,
// sorted.
func Destinations(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	all, err := sources.Load(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range all {
		if !slices.Contains(out, s.Destination) {
			out = append(out, s.Destination)
		}
	}
	slices.Sort(out)
	return out, nil
}

// store returns the shared facts of a destination an installed source
// goes to; the error wraps ErrUnknown and names the known ones otherwise.
func store(ctx context.Context, pool *pgxpool.Pool, dest string) (*breakerstore.Store, error) {
	known, err := Destinations(ctx, pool)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(known, dest) {
		return nil, fmt.Errorf("destination %s: %w (installed: %s)", dest, ErrUnknown, strings.Join(known, ", "))
	}
	return breakerstore.New(pool, &breakerstore.Config{Namespace: breakerstore.DestinationNamespace(dest)})
}

// ErrNotHeld is wrapped by the error of a Pause or Resume that some
// running daemon did not take within the bound (a NotHeldError).
var ErrNotHeld = errors.New("not held by every running daemon")

// NotHeldError names the daemons that did not take a pause or resume
// within the bound: the hold is recorded, and they take it when they next
// read it, but until then one of them may still send.
type NotHeldError struct {
	Paused  bool
	Daemons []string
	Within  time.Duration
}

func (e *NotHeldError) Error() string {
	what := "resume"
	if e.Paused {
		what = "pause"
	}
	return fmt.Sprintf("the %s is recorded, but %d running daemon(s) did not take it within %s: %s",
		what, len(e.Daemons), e.Within, strings.Join(e.Daemons, ", "))
}

// Unwrap makes it an ErrNotHeld.
func (e *NotHeldError) Unwrap() error { return ErrNotHeld }

// Pause stops every daemon sending to the destination, until Resume;
// pending rows are kept. by says who asked (ByCommandLine, ByConsole). It
// returns once every running daemon holds the pause, so that a row
// written after it returns is not sent (internal/presence), or after
// within (presence.AwaitDefault when 0) with a *NotHeldError naming those
// that did not.
func Pause(ctx context.Context, pool *pgxpool.Pool, dest, by string, within time.Duration) error {
	return setHold(ctx, pool, dest, breakerstore.Hold{Paused: true, By: by}, within)
}

// Resume ends a Pause, and returns once every running daemon sends again,
// or after within with a *NotHeldError, as Pause.
func Resume(ctx context.Context, pool *pgxpool.Pool, dest, by string, within time.Duration) error {
	return setHold(ctx, pool, dest, breakerstore.Hold{Paused: false, By: by}, within)
}

func setHold(ctx context.Context, pool *pgxpool.Pool, dest string, h breakerstore.Hold, within time.Duration) error {
	st, err := store(ctx, pool, dest)
	if err != nil {
		return err
	}
	if h, err = st.SetHold(ctx, h); err != nil {
		return err
	}
	within = cmp.Or(within, presence.AwaitDefault)
	missing, err := presence.Await(ctx, pool, dest, h.Generation, within)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return &NotHeldError{Paused: h.Paused, Daemons: missing, Within: within}
	}
	return nil
}

// Probe asks the daemons to probe the destination now if it is held by a
// refusal of its credentials or URL, rather than at the next probe
// interval.
func Probe(ctx context.Context, pool *pgxpool.Pool, dest, by string) error {
	st, err := store(ctx, pool, dest)
	if err != nil {
		return err
	}
	return st.SetProbe(ctx, breakerstore.Probe{By: by})
}

// CancelReplay stops a replay: nothing more of it is sent.
func CancelReplay(ctx context.Context, pool *pgxpool.Pool, id int64) error {
	return replays.Cancel(ctx, pool, id)
}

// SourceReplay is a replay of a source by key range, planned: its rows
// counted (the dry run) before it is started.
type SourceReplay struct {
	Source *sources.Source
	Range  sources.ReplayRange
	// Count is how many keys it would send.
	Count int64
}

// PlanSourceReplay checks a key range of a source and counts its keys;
// an empty bound is open. A bad key or range wraps sources.ErrBadKey or
// is returned as is; an unknown source is a *NoSourceError.
func PlanSourceReplay(ctx context.Context, pool *pgxpool.Pool, source, fromKey, toKey string) (*SourceReplay, error) {
	all, err := sources.Load(ctx, pool)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(all, func(s *sources.Source) bool { return s.Name == source })
	if i < 0 {
		return nil, &NoSourceError{Name: source}
	}
	p := &SourceReplay{Source: all[i], Range: sources.ReplayRange{FromKey: fromKey, ToKey: toKey}}
	if err := p.Source.CheckRange(&p.Range); err != nil {
		return nil, err
	}
	if p.Count, err = sources.CountReplay(ctx, pool, p.Source, p.Range); err != nil {
		return nil, err
	}
	return p, nil
}

// Start records the replay and wakes the source's daemons, in one
// transaction, and returns its id. A plan of no key starts nothing.
func (p *SourceReplay) Start(ctx context.Context, pool *pgxpool.Pool) (id int64, err error) {
	if p.Count == 0 {
		return 0, fmt.Errorf("no row of source %s matches the range: nothing to replay, no replay created", p.Source.Name)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if id, err = sources.CreateReplay(ctx, tx, p.Source, p.Range, p.Count); err != nil {
			return err
		}
		return outbox.Wake(ctx, tx, p.Source.Name)
	})
	return id, err
}
