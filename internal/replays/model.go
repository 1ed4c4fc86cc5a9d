package replays

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/resources"
)

// The one replay model, for every source alike: a Request is planned
// against the source's Table (checked and counted: the dry run), the Plan
// started (recorded, and the source's job woken through the outbox like
// any other work, so the relay alone inserts jobs), its Progress read, and
// Cancel stops it. The command line and the console both go through it
// (internal/operator picks the Table by the source's name), so they
// cannot drift apart. How the rows go differs by kind of source, below
// this API: resources' job sends a replay's range from a checkpoint of its
// own, under keys of its own; a configured source's job logs the keys as
// changes, sent under the source's keys.

// ErrBadRange is wrapped by the errors of a request a source cannot take:
// a bound of another kind of source, or a start after its end.
var ErrBadRange = errors.New("not a range of the source")

// Request is what a person asks to replay: a source and a range of its
// rows; the zero range is the whole source.
type Request struct {
	// Source names the source: jobs.Resources or a configured source
	// (Create takes resources' as empty, the form its replay is stored in).
	Source string
	// Filter is the range of a replay of resources: ids, creation time,
	// failed rows only.
	Filter resources.Filter
	// Range is the range of a replay of a configured source: keys, time
	// of last change. For resources, FromKey and ToKey are ids (its key),
	// so a form that asks for keys serves every source.
	Range SourceRange
}

// Table is the rows of one source as a replay sees them. The caller picks
// it by the source's name (operator.ReplayTable): Resources, or a
// configured source's (internal/sources).
type Table interface {
	// Name is the source's name.
	Name() string
	// CountReplay checks r against the source, normalizing it in place,
	// and counts the rows it would send. A range the source cannot take
	// wraps ErrBadRange (or the source's own error for a bad key).
	CountReplay(ctx context.Context, q database.Querier, r *Request) (int64, error)
}

// Starter is a Table with something of its own to do in the transaction
// that starts a replay of it: a configured source forgets the digests of
// the bodies the third party accepted, so the replay skips none of its
// keys as unchanged.
type Starter interface {
	Starting(ctx context.Context, tx pgx.Tx) error
}

// Plan is a replay checked and counted, not yet started.
type Plan struct {
	Request
	// Count is how many rows (keys) it would send.
	Count int64

	table Table
}

// What a replay counts (Progress.Unit, Plan.Unit): rows of resources,
// keys of a configured source. Which a source is, is decided above this
// package (rows.KindOf, rows.ReplayUnit): here by the Table it was
// planned against, or by the stored form of its replay.
const (
	UnitRows = "rows"
	UnitKeys = "keys"
)

// ofResources reports whether the plan is resources': its Table, picked
// by the source's kind (rows.Open), is this package's own.
func (p *Plan) ofResources() bool {
	_, ok := p.table.(resourcesTable)
	return ok
}

// Unit is what the plan's Count counts: UnitRows or UnitKeys.
func (p *Plan) Unit() string {
	if p.ofResources() {
		return UnitRows
	}
	return UnitKeys
}

// PlanReplay checks r against t and counts what it would send: the dry
// run. Nothing is recorded.
func PlanReplay(ctx context.Context, q database.Querier, t Table, r Request) (*Plan, error) {
	r.Source = t.Name()
	n, err := t.CountReplay(ctx, q, &r)
	if err != nil {
		return nil, err
	}
	return &Plan{Request: r, Count: n, table: t}, nil
}

// Start records the planned replay and wakes the source's job, in one
// transaction, and returns its id: the relay makes sure a job runs it, as
// for any work, so at most one job per source is ever pending. A plan of
// no row starts nothing.
func (p *Plan) Start(ctx context.Context, db database.DB) (id int64, err error) {
	if p.Count == 0 {
		what := "no row matches the range"
		if !p.ofResources() {
			what = "no row of source " + p.Source + " matches the range"
		}
		return 0, fmt.Errorf("%s: nothing to replay, no replay created", what)
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if st, ok := p.table.(Starter); ok {
			if err := st.Starting(ctx, tx); err != nil {
				return err
			}
		}
		r := p.Request
		if p.ofResources() {
			r.Source = "" // resources' replay is stored without a source
		}
		if id, err = Create(ctx, tx, r, p.Count); err != nil {
			return err
		}
		return outbox.Wake(ctx, tx, p.Source)
	})
	return id, err
}

// Resources is the resources table as a replay's Table.
var Resources Table = resourcesTable{}

type resourcesTable struct{}

func (resourcesTable) Name() string { return jobs.Resources }

// CountReplay takes FromKey and ToKey as ids, and refuses the bounds of a
// configured source's range (the time of last change).
func (resourcesTable) CountReplay(ctx context.Context, q database.Querier, r *Request) (int64, error) {
	if !r.Range.Since.IsZero() || !r.Range.Until.IsZero() || r.Range.ChangedColumn != "" {
		return 0, fmt.Errorf("resources are replayed by creation time, not by a changed_at column: %w", ErrBadRange)
	}
	for _, b := range []struct {
		key string
		id  *int64
	}{{r.Range.FromKey, &r.Filter.FromID}, {r.Range.ToKey, &r.Filter.ToID}} {
		if b.key == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(b.key), 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q is not an id of resources: %w", b.key, ErrBadRange)
		}
		*b.id = n
	}
	r.Range = SourceRange{}
	f := r.Filter
	if f.FromID != 0 && f.ToID != 0 && f.FromID > f.ToID {
		return 0, fmt.Errorf("from %d is after to %d: %w", f.FromID, f.ToID, ErrBadRange)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return 0, fmt.Errorf("since must be before until: %w", ErrBadRange)
	}
	return resources.Count(ctx, q, f)
}

// Progress is a replay with how far it went.
type Progress struct {
	Replay
	// Unit is what Sent and TotalRows count: UnitRows or UnitKeys.
	Unit string
	// Sent counts the rows or keys accepted or rejected so far.
	Sent int64
	// Failed counts the rows of resources the third party rejected; keys
	// of a configured source count none here (its failures are its own).
	Failed int64
	// Queued counts the keys a configured source's replay logged for
	// export so far; for resources it is Sent.
	Queued int64
	// Range is a configured source's range; for resources it is Filter.
	Range SourceRange
	// Over means nothing of the replay is left to send: it is done and,
	// for a configured source, every key it logged was sent.
	Over bool
}

// Percent is the share of the replay sent. A replay of a source's keys
// is done once its keys are queued, while the daemons still send them (a
// tenant refused holds them all): until the last is sent it is the share
// sent, never 100 beside "0 of 41 keys".
func (p Progress) Percent() float64 {
	if p.Source == "" || p.Over {
		return p.Replay.Percent(p.Sent)
	}
	if p.TotalRows == 0 {
		return 0
	}
	return min(100, float64(p.Sent)*100/float64(p.TotalRows))
}

// StateSending is what a replay of a source's keys is shown as once its
// keys are queued (State done) while some are still to be sent.
const StateSending State = "sending"

// ShownState is the state every reader names (replay --list and --wait,
// status, the console): done only once nothing of the replay is left to
// send.
func (p Progress) ShownState() State {
	if p.State == StateDone && !p.Over {
		return StateSending
	}
	return p.State
}

// Unsent counts the keys still pending from the changes up to each source
// replay's last one (syncer_changes is internal/sources' table, which
// answers: sources.ReplaysUnsent), by replay id.
type Unsent func(ctx context.Context, q database.Querier, logged []SourceProgress) (map[int64]int64, error)

// ProgressOf reads the progress of the replays rps, in their order: the
// one reader of the command line (--list, --wait) and of status (and so
// of the console). unsent may be nil when rps holds no replay of a
// configured source.
func ProgressOf(ctx context.Context, q database.Querier, unsent Unsent, rps []Replay) ([]Progress, error) {
	out := make([]Progress, len(rps))
	var ofSources map[int64]SourceProgress
	var left map[int64]int64
	for i, rp := range rps {
		p := Progress{Replay: rp, Unit: UnitRows}
		if rp.Source == "" {
			cp, err := checkpoint.Get(ctx, q, checkpoint.Replay(rp.ID))
			if err != nil {
				return nil, err
			}
			p.Sent, p.Failed = cp.RowsDone+cp.RowsFailed, cp.RowsFailed
			p.Queued, p.Over = p.Sent, rp.State == StateDone
			out[i] = p
			continue
		}
		if ofSources == nil {
			all, err := SourcesProgress(ctx, q)
			if err != nil {
				return nil, err
			}
			ofSources = make(map[int64]SourceProgress, len(all))
			for _, sp := range all {
				ofSources[sp.ID] = sp
			}
			var logged []SourceProgress
			for _, sp := range all {
				if sp.LastSeq > 0 {
					logged = append(logged, sp)
				}
			}
			if len(logged) > 0 {
				if unsent == nil {
					return nil, fmt.Errorf("replays: progress of source replay %d: no reader of its unsent keys", rp.ID)
				}
				if left, err = unsent(ctx, q, logged); err != nil {
					return nil, err
				}
			}
		}
		sp := ofSources[rp.ID]
		p.Unit, p.Range, p.Queued = UnitKeys, sp.Range, sp.KeysLogged
		p.Sent = max(sp.KeysLogged-left[rp.ID], 0)
		p.Over = rp.State == StateDone && left[rp.ID] == 0
		out[i] = p
	}
	return out, nil
}

// ProgressOfOne reads one replay's progress, or returns ErrNotFound.
func ProgressOfOne(ctx context.Context, q database.Querier, unsent Unsent, id int64) (Progress, error) {
	rp, err := Load(ctx, q, id)
	if err != nil {
		return Progress{}, err
	}
	ps, err := ProgressOf(ctx, q, unsent, []Replay{rp})
	if err != nil {
		return Progress{}, err
	}
	return ps[0], nil
}
