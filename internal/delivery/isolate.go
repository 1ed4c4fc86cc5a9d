package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// isolateProbe is how many items rendered alone must all fail, from the
// first, for a request program to count as failing on every row: then the
// program is the destination's fault (its configuration), not the rows'.
const isolateProbe = 8

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

// isolate handles a batch whose request program failed, as a 400 is
// handled but without a request: each item is rendered alone, the items
// the program fails on are rejected with its error as their reason, and
// the others go together. A program that fails on the first items alone
// (isolateProbe of them, or all of a smaller batch of several) fails on
// every row: nothing is rejected, and the destination is held with the
// error until a probe finds it mended.
func (d *Deliverer) isolate(ctx context.Context, j *job, items []thirdparty.Item, err error, pendingSince time.Time, out *Outcome) error {
	if len(items) == 1 {
		out.Rejected = append(out.Rejected, Rejection{Item: items[0], Error: "format: " + thirdparty.SafeText(err.Error())})
		return nil
	}
	var good []thirdparty.Item
	var bad []Rejection
	for i := range items {
		b := j.batch
		b.Items = items[i : i+1 : i+1]
		_, ierr := d.format.Requests(&b)
		switch {
		case ierr == nil:
			good = append(good, items[i])
			continue
		case !isProgramFailure(ierr):
			return ierr
		}
		bad = append(bad, Rejection{Item: items[i], Error: "format: " + thirdparty.SafeText(ierr.Error())})
		if len(good) == 0 && (len(bad) == isolateProbe || len(bad) == len(items)) {
			return d.refused(ctx, &d.conf, &thirdparty.Error{Err: fmt.Errorf("%w: %w", ErrProgram, err)},
				"delivery: the request program of the destination's format fails on every row; nothing is sent and no row fails until a probe finds it mended (check request.body of destination "+d.cfg.Name+")")
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
