// Package operator holds what a person does to a running syncer, from the
// command line or the console alike: retry a source's failed keys, pause,
// resume or probe a destination, plan, start, follow or cancel a replay of
// any source (the replay model is internal/replays'). Each
// action asks the packages that own the tables (rows for a source's rows,
// replays, outbox, breakerstore); none writes SQL of its own, so the two
// front ends cannot drift apart.
package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/holds"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/presence"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Who asked, as status shows it.
const (
	ByCommandLine = "command line"
	ByConsole     = "console"
)

// ErrUnknown is wrapped by the errors of an action on a source or a
// destination that is not installed.
var ErrUnknown = rows.ErrUnknown

// NoSourceError is returned for a source that is not installed.
type NoSourceError = rows.NoSourceError

// Retry makes the failed keys of sc (a source, or one tenant of it) eligible
// again, all of them or those named (each in its text form; for
// resources, ids), and wakes the daemons in the same transaction. It
// returns how many keys are pending again. An unknown source is a
// *NoSourceError; a tenant of a source without tenants a
// *rows.NoTenantsError; a key that cannot be one of the source's wraps
// sources.ErrBadKey.
func Retry(ctx context.Context, pool *pgxpool.Pool, sc rows.Scope, keys []string) (n int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		r, err := rows.Open(ctx, tx, sc)
		if err != nil {
			return err
		}
		if n, err = r.Retry(ctx, tx, keys); err != nil || n == 0 {
			return err
		}
		// Clearing a failure is not a payload change: no trigger fired.
		return outbox.Wake(ctx, tx, sc.Source)
	})
	return n, err
}

// ReleaseHeld makes the held keys of a source go at once, all of them
// when keys is nil, and wakes its daemon: what retry-failed does to a key
// the third party keeps answering transiently (docs/operations.md). It
// returns how many it released.
func ReleaseHeld(ctx context.Context, pool *pgxpool.Pool, source string, keys []string) (n int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if n, err = holds.Clear(ctx, tx, rows.HeldFeedOf(source), keys); err != nil || n == 0 {
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
	within = presence.Within(within)
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
	_, _, err := AskProbe(ctx, pool, dest, by)
	return err
}

// AskProbe is Probe, and returns the probe asked, whose answer
// WaitProbeAnswer waits for. held says whether a refusal holds the
// destination: when none does, nothing is asked (there is nothing to
// probe) and the zero Probe is returned.
func AskProbe(ctx context.Context, pool *pgxpool.Pool, dest, by string) (p breakerstore.Probe, held bool, err error) {
	st, err := store(ctx, pool, dest)
	if err != nil {
		return p, false, err
	}
	return askProbe(ctx, st, by)
}

// askProbe asks for a probe in st's namespace (a destination's or a
// tenant's) when a refusal of its credentials or URL holds it.
func askProbe(ctx context.Context, st *breakerstore.Store, by string) (p breakerstore.Probe, held bool, err error) {
	facts, err := st.Load(ctx)
	if err != nil {
		return p, false, err
	}
	if !facts.Credentials.Refused && !facts.Configuration.Refused {
		return p, false, nil
	}
	p = breakerstore.Probe{At: time.Now().UTC(), By: by}
	return p, true, st.SetProbe(ctx, p)
}

// probePoll is how often WaitProbeAnswer reads the destination's facts.
const probePoll = 200 * time.Millisecond

// WaitProbeAnswer waits for the answer to the probe p of dest, until ctx
// ends (then it returns ctx's error: no daemon answered).
func WaitProbeAnswer(ctx context.Context, pool *pgxpool.Pool, dest string, p breakerstore.Probe) (breakerstore.ProbeAnswer, error) {
	return waitProbeAnswer(ctx, pool, breakerstore.DestinationNamespace(dest), p)
}

// waitProbeAnswer waits for the answer to probe p in namespace ns.
func waitProbeAnswer(ctx context.Context, pool *pgxpool.Pool, ns string, p breakerstore.Probe) (breakerstore.ProbeAnswer, error) {
	t := time.NewTicker(probePoll)
	defer t.Stop()
	for {
		st, err := breakerstore.ReadStateOf(ctx, pool, ns)
		if err != nil && ctx.Err() == nil {
			return breakerstore.ProbeAnswer{}, err
		}
		if err == nil && st.ProbeAnswer.For.Equal(p.At) {
			return st.ProbeAnswer, nil
		}
		select {
		case <-ctx.Done():
			return breakerstore.ProbeAnswer{}, ctx.Err()
		case <-t.C:
		}
	}
}

// ReplayTable is the named source as a replay's table, else a
// *NoSourceError.
func ReplayTable(ctx context.Context, pool *pgxpool.Pool, name string) (replays.Table, error) {
	r, err := rows.Open(ctx, pool, rows.Scope{Source: name})
	if err != nil {
		return nil, err
	}
	return r.ReplayTable(), nil
}

// PlanReplay checks r against its source and counts what it would send:
// the dry run, recording nothing. An unknown source is a *NoSourceError;
// a bad range wraps replays.ErrBadRange or sources.ErrBadKey. Start the
// plan with its Start.
func PlanReplay(ctx context.Context, pool *pgxpool.Pool, r replays.Request) (*replays.Plan, error) {
	t, err := ReplayTable(ctx, pool, r.Source)
	if err != nil {
		return nil, err
	}
	return replays.PlanReplay(ctx, pool, t, r)
}

// KeyRange is the request of a replay of source's keys from through to
// (an empty bound is open): what the console's form asks, for resources
// (whose key is its id) as for a configured source.
func KeyRange(source, from, to string) replays.Request {
	return replays.Request{Source: source, Range: replays.SourceRange{FromKey: from, ToKey: to}}
}

// ReplayProgress reads a replay's progress, or wraps replays.ErrNotFound.
func ReplayProgress(ctx context.Context, pool *pgxpool.Pool, id int64) (replays.Progress, error) {
	return replays.ProgressOfOne(ctx, pool, sources.ReplaysUnsent, id)
}

// ListReplays returns every replay with its progress, oldest first.
func ListReplays(ctx context.Context, pool *pgxpool.Pool) ([]replays.Progress, error) {
	all, err := replays.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	return replays.ProgressOf(ctx, pool, sources.ReplaysUnsent, all)
}

// CancelReplay stops a replay: nothing more of it is sent.
func CancelReplay(ctx context.Context, pool *pgxpool.Pool, id int64) error {
	return replays.Cancel(ctx, pool, id)
}
