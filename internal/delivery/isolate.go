package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// A request program that fails on every row is the destination's fault
// (its configuration), not the rows': failing each row it fails on would
// fail every row written until someone edits it. A program that fails on
// one row's data, among rows it renders, is that row's fault. The rule
// tells them apart however the rows arrive:
//
//   - a batch of several rows the program fails on is rendered row by
//     row: the rows it fails on alone are failed with its error, the
//     others go together. If it fails on the first isolateProbe rows alone
//     (or on every row of a smaller batch) the program fails on every row;
//   - a row alone (a batch of one, as rows come when they are written one
//     at a time) is weighed against a witness, a row the program rendered
//     before in this process: if the program renders the witness still,
//     the row fails at once (a poison row); if it fails on the witness too,
//     it fails on every row. With no witness yet (the program has rendered
//     nothing since it was built), the row is a strike: it stays pending
//     and goes again after programRecheck, and programStrikes strikes in a
//     row mean the program fails on every row;
//   - isolateProbe rows failed alone in a row, with no row rendered
//     between them, mean the same however good the witness is: the rows
//     changed under the program (a migration), which is the program's to
//     follow.
//
// Rows and tombstones are judged apart, each kind with its own witness
// and counts: a format may render tombstones with a program of its own
// (custom's deletes), and a tombstone rendered is no evidence that the
// program for rows renders them (the soak's broken request program
// failed orders as poison rows so).
//
// A program that fails on every row fails no row: the destination is held
// with the program's error as a misconfigured URL is (status, the
// misconfigured metric and its alert say why), nothing is sent or
// rendered but a probe every AuthProbeInterval, and the rows stay pending.
// An edit of the program (a reload builds a new Deliverer) or `syncer
// probe` lets the next batch try at once; once the program renders a row
// and the third party accepts it, the hold ends.
const (
	// isolateProbe is how many rows alone, failed in a row, mean the
	// program fails on every row.
	isolateProbe = 8
	// programStrikes is how many rows alone a program that never rendered
	// a row may fail on, each kept pending, before it fails on every row.
	programStrikes = 3
	// programRecheck is how long a strike's row waits before it goes
	// again.
	programRecheck = 2 * time.Second
)

// programFailure is a format's request program failing on the items it
// was given (custom.ProgramError): a batch the format cannot send.
type programFailure interface{ ProgramFailed() bool }

func isProgramFailure(err error) bool {
	var pf programFailure
	return errors.As(err, &pf) && pf.ProgramFailed()
}

// ErrProgram is a request program that fails on every row: the
// destination's configuration, held as a refused URL is, and no row fails.
var ErrProgram = errors.New("delivery: the request program fails on every row")

// ErrProgramStrike is a request program that failed on a row alone before
// it rendered any: the row stays pending, to go again after the error's
// wait, while syncer tells a broken program from a bad row.
var ErrProgramStrike = errors.New("delivery: the request program failed on a row and has rendered none yet; kept pending while syncer tells a broken program from a bad row")

// programs is what the Deliverer knows of its format's request program,
// by the kind of row: a format may render tombstones with a program of
// its own (custom's deletes), so a tombstone it rendered says nothing of
// whether the program for rows renders them, and the other way round.
type programs struct {
	kinds [2]programKind
	mu    sync.Mutex
}

// programKind is what is known of the program for one kind of row.
type programKind struct {
	// witness is a row of the kind the program rendered, cloned; nil
	// until one was.
	witness atomic.Pointer[thirdparty.Item]
	// failing is set while failed holds keys: a rendered row of the kind
	// clears them.
	failing atomic.Bool
	// failed are the keys of the kind failed alone in a row, with no row
	// of the kind rendered between them; strikes the rows kept pending as
	// strikes. Under programs.mu.
	failed  map[string]struct{}
	strikes int
}

// kindOf indexes programs.kinds: 0 for a row, 1 for a tombstone.
func kindOf(it *thirdparty.Item) int {
	if it.Deleted {
		return 1
	}
	return 0
}

// rendered notes rows the program rendered and the third party accepted:
// the first of each kind becomes its witness, and the failures in a row
// of the kinds rendered end.
func (p *programs) rendered(items []thirdparty.Item) {
	var seen [2]bool
	for i := range items {
		k := kindOf(&items[i])
		if seen[k] {
			if seen[1-k] {
				break
			}
			continue
		}
		seen[k] = true
		pk := &p.kinds[k]
		if pk.witness.Load() == nil {
			w := items[i]
			w.Payload = bytes.Clone(w.Payload) // not the batch's whole body
			pk.witness.CompareAndSwap(nil, &w)
		}
		if pk.failing.Load() {
			p.mu.Lock()
			pk.failed, pk.strikes = nil, 0
			pk.failing.Store(false)
			p.mu.Unlock()
		}
	}
}

// failedAlone counts a row failed alone, and returns how many distinct
// rows of its kind were, in a row, and the strikes among them (strike:
// the row is kept pending).
func (p *programs) failedAlone(it *thirdparty.Item, strike bool) (rows, strikes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pk := &p.kinds[kindOf(it)]
	if pk.failed == nil {
		pk.failed = map[string]struct{}{}
	}
	pk.failed[it.ID] = struct{}{}
	if strike {
		pk.strikes++
	}
	pk.failing.Store(true)
	return len(pk.failed), pk.strikes
}

// programHeld returns the hold's *WaitError while the request program is
// held for failing on every row and its probe time has not come: nothing
// is rendered meanwhile (a program past its time bound costs a core for
// that long). A person's probe ends the wait.
func (d *Deliverer) programHeld(ctx context.Context) error {
	if !d.held.Load() {
		return nil
	}
	d.loadShared(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &d.conf
	if r.state != refusalStanding || !errors.Is(r.err, ErrProgram) {
		return nil
	}
	if wait := r.until.Sub(d.now()); wait > 0 {
		return &WaitError{Err: r.err, Wait: wait}
	}
	return nil // this batch is the probe
}

// isolate handles a batch whose request program failed, as a 400 is
// handled but without a request (see the rule above). Rows and
// tombstones are judged apart: only a row of its own kind rendered makes
// a row the program fails on a poison row.
func (d *Deliverer) isolate(ctx context.Context, j *job, items []thirdparty.Item, err error, pendingSince time.Time, out *Outcome) error {
	if len(items) == 1 {
		return d.isolateOne(ctx, j, items[0], err, out)
	}
	var good []thirdparty.Item
	var bad []Rejection
	var all, rendered, failed [2]int
	for i := range items {
		k := kindOf(&items[i])
		all[k]++
		b := j.batch
		b.Items = items[i : i+1 : i+1]
		_, ierr := d.format.Requests(&b)
		switch {
		case ierr == nil:
			good = append(good, items[i])
			rendered[k]++
			continue
		case !isProgramFailure(ierr):
			return ierr
		}
		bad = append(bad, Rejection{Item: items[i], Error: "format: " + thirdparty.SafeText(ierr.Error())})
		if failed[k]++; rendered[k] == 0 && failed[k] == isolateProbe {
			return d.programBroken(ctx, err, strconv.Itoa(isolateProbe)+" rows of a batch failed alone, none rendered")
		}
	}
	if len(bad) == 0 {
		// Every row renders alone, and not all together (a program slow
		// or big in the batch's size, or the memory bound counting other
		// goroutines' bytes): sending them all again would fail again,
		// for good. Halves, as a 413 splits, end at rows alone.
		half := len(good) / 2
		for _, part := range [][]thirdparty.Item{good[:half], good[half:]} {
			if err := d.deliver(ctx, j, part, nil, pendingSince, false, out); err != nil {
				return err
			}
		}
		return nil
	}
	for k := range all {
		if rendered[k] > 0 || failed[k] == 0 {
			continue
		}
		// The program failed on every row of the kind in the batch.
		if failed[k] > 1 {
			return d.programBroken(ctx, err, strconv.Itoa(failed[k])+" rows of a batch failed alone, none of their kind rendered")
		}
		// One row of its kind, beside rows of the other: judged as a row
		// alone. It is failed (a poison row) or the batch waits.
		i := slices.IndexFunc(bad, func(r Rejection) bool { return kindOf(&r.Item) == k })
		one := &Outcome{}
		if err := d.isolateOne(ctx, j, bad[i].Item, err, one); err != nil {
			return err
		}
	}
	d.logger.WarnContext(ctx, "delivery: the request program fails on some rows: they are failed with its error, the others go",
		slog.Int("failed", len(bad)), slog.Int("going", len(good)), slog.String("error", thirdparty.SafeText(err.Error())))
	out.Rejected = append(out.Rejected, bad...)
	if len(good) == 0 {
		return nil
	}
	return d.deliver(ctx, j, good, nil, pendingSince, false, out)
}

// isolateOne handles a row alone that the request program failed on.
func (d *Deliverer) isolateOne(ctx context.Context, j *job, it thirdparty.Item, err error, out *Outcome) error {
	reason := "format: " + thirdparty.SafeText(err.Error())
	w := d.programs.kinds[kindOf(&it)].witness.Load()
	if w == nil {
		rows, strikes := d.programs.failedAlone(&it, true)
		if strikes >= programStrikes || rows >= isolateProbe {
			return d.programBroken(ctx, err, strconv.Itoa(strikes)+" failures of rows alone in a row, no row rendered since the program was built")
		}
		if d.lastError(ctx, reason, 0, "program") {
			d.logger.WarnContext(ctx, "delivery: the request program failed on a row and has rendered none yet: the row is kept pending while syncer tells a broken program from a bad row",
				slog.String("key", thirdparty.SafeText(it.ID)), slog.Int("strikes", strikes), slog.String("error", reason))
		}
		return &WaitError{Err: fmt.Errorf("%w: %w", ErrProgramStrike, err), Wait: programRecheck}
	}
	b := j.batch
	b.Items = []thirdparty.Item{*w}
	_, werr := d.format.Requests(&b)
	switch {
	case werr == nil:
	case isProgramFailure(werr):
		return d.programBroken(ctx, err, "it fails on a row it rendered before (key "+thirdparty.SafeText(w.ID)+") too")
	default:
		return werr
	}
	if rows, _ := d.programs.failedAlone(&it, false); rows >= isolateProbe {
		return d.programBroken(ctx, err, strconv.Itoa(rows)+" rows alone failed in a row, none rendered between them")
	}
	d.logger.WarnContext(ctx, "delivery: the request program fails on a row it renders others beside: the row is failed with its error",
		slog.String("key", thirdparty.SafeText(it.ID)), slog.String("error", reason))
	out.Rejected = append(out.Rejected, Rejection{Item: it, Error: reason})
	return nil
}

// programBroken holds the destination for a request program that fails
// on every row (why says how that is known): no row fails.
func (d *Deliverer) programBroken(ctx context.Context, err error, why string) error {
	d.lastError(ctx, "format: "+thirdparty.SafeText(err.Error()), 0, "program")
	return d.refused(ctx, &d.conf, &thirdparty.Error{Err: fmt.Errorf("%w: %w", ErrProgram, err)},
		"delivery: the request program of the destination's format fails on every row ("+why+
			"); nothing is sent and no row fails until a probe finds it mended (edit request.body or deletes.body of destination "+d.cfg.Name+", or run syncer probe)")
}
