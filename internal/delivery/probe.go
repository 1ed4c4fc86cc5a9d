package delivery

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// answerProbe records, after the request that follows a person's probe
// (syncer probe, the console's Probe now), what it met, for the command
// to print: accepted, or refused again and why. Only the first request
// after the probe answers it; without a probe waiting it costs one
// atomic load.
func (d *Deliverer) answerProbe(ctx context.Context, err error) {
	if d.probeFor.Load() == 0 {
		return
	}
	at := d.probeFor.Swap(0)
	if at == 0 || d.store == nil {
		return
	}
	a := breakerstore.ProbeAnswer{For: time.Unix(0, at).UTC(), Accepted: err == nil, Held: d.refusing()}
	var tpErr *thirdparty.Error
	switch {
	case err == nil:
		a.Status = http.StatusOK
	case errors.As(err, &tpErr):
		a.Status, a.Text = tpErr.StatusCode, tpErr.Error()
	default:
		a.Text = thirdparty.SafeText(err.Error())
	}
	wctx, cancel := d.writeContext(ctx)
	defer cancel()
	if werr := d.store.SetProbeAnswer(wctx, a); werr != nil {
		d.logger.WarnContext(ctx, "delivery: record the probe's answer", slog.String("error", werr.Error()))
	}
}
