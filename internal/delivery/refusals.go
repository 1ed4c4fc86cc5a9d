package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// checkRefusals returns a *WaitError while the credentials or the URL are
// refused and the probe time has not come; when it has, the caller's
// request is the probe, and the others wait for another interval.
func (d *Deliverer) checkRefusals() error {
	if !d.held.Load() {
		return nil
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range []*refusal{&d.creds, &d.conf} {
		if r.state != refusalStanding {
			continue
		}
		if wait := r.until.Sub(now); wait > 0 {
			return &WaitError{Err: r.err, Wait: wait}
		}
		r.until = now.Add(d.cfg.AuthProbeInterval)
	}
	return nil
}

// refusing reports whether a refusal stands: the next request that may go
// is a probe.
func (d *Deliverer) refusing() bool {
	if !d.held.Load() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.creds.state == refusalStanding || d.conf.state == refusalStanding
}

// refused records a refusal (401/403, or a redirect/404/410), logs it once
// per transition across daemons, and returns the *WaitError for the caller.
func (d *Deliverer) refused(ctx context.Context, r *refusal, tpErr *thirdparty.Error, msg string) error {
	err := fmt.Errorf("%w: %w", r.sentinel, tpErr)
	d.mu.Lock()
	local := r.state != refusalStanding
	r.state, r.until, r.err = refusalStanding, d.now().Add(d.cfg.AuthProbeInterval), err
	r.storm = errors.Is(tpErr, ErrRejectionStorm)
	d.held.Store(true)
	d.mu.Unlock()
	if r == &d.conf {
		d.urlGood.Store(false)
	}
	d.setRefusalMetric(r, true)
	changed := local
	if d.store != nil {
		wctx, cancel := d.writeContext(ctx)
		c, serr := d.store.SetRefusal(wctx, r.key, breakerstore.Refusal{
			Refused: true, Status: tpErr.StatusCode, Message: tpErr.Error(), TokenEndpoint: tpErr.TokenEndpoint,
		})
		cancel()
		if serr != nil {
			d.logger.WarnContext(ctx, "delivery: record the refusal", slog.String("error", serr.Error()))
		} else {
			changed = c
		}
	}
	if changed {
		attrs := []any{slog.Int("status", tpErr.StatusCode), slog.String("answer", tpErr.Error()), slog.Duration("probe_every", d.cfg.AuthProbeInterval)}
		if tpErr.TokenEndpoint != "" {
			// The status is the token endpoint's, not the destination's.
			attrs = append(attrs, slog.String("token_endpoint", tpErr.TokenEndpoint))
		}
		d.logger.ErrorContext(ctx, msg, attrs...)
	}
	return &WaitError{Err: err, Wait: d.cfg.AuthProbeInterval}
}

// accepted ends the refusals after an answered request; a rejection
// storm's only when the answer accepted an item (acceptedAny). The first
// success of a process also clears a refusal an earlier process left
// recorded.
func (d *Deliverer) accepted(ctx context.Context, acceptedAny bool) {
	if !d.held.Load() {
		return // nothing is refused: the common case, once per accepted request
	}
	d.mu.Lock()
	none := d.creds.state == refusalNone && d.conf.state == refusalNone
	d.mu.Unlock()
	if none {
		return // a pause holds, and nothing is refused
	}
	for _, r := range []*refusal{&d.creds, &d.conf} {
		d.end(ctx, r, func(r *refusal) bool {
			// The storm goes on while every item is rejected again.
			return r.state != refusalStanding || !r.storm || acceptedAny
		}, "")
	}
}

// granted ends a refusal of the credentials' token endpoint once a request
// went to the destination: it carried a token the endpoint granted, so
// whatever the destination answered (a 400 on the body, a 5xx, no answer)
// the endpoint's refusal is over, and status and the probe tell the
// current reason rather than the endpoint's old one. A refusal of the
// destination's own (401, 403) ends only with an answer that accepts
// (accepted).
func (d *Deliverer) granted(ctx context.Context) {
	if !d.held.Load() {
		return // nothing is refused: the common case
	}
	d.end(ctx, &d.creds, func(r *refusal) bool {
		if r.state == refusalUnknown {
			return r.storedByEndpoint // an earlier process's, or another daemon's
		}
		var tpErr *thirdparty.Error
		return r.state == refusalStanding && errors.As(r.err, &tpErr) && tpErr.TokenEndpoint != ""
	}, "delivery: the token endpoint grants the credentials again, and a request went to the third party")
}

// end ends refusal r when may holds of it (under d.mu), here and in the
// store, and logs the end once across daemons (msg, or the refusal's own
// words when "").
func (d *Deliverer) end(ctx context.Context, r *refusal, may func(*refusal) bool, msg string) {
	d.mu.Lock()
	if !may(r) {
		d.mu.Unlock()
		return
	}
	prev, program := r.state, errors.Is(r.err, ErrProgram)
	r.state, r.until, r.err, r.storm, r.storedByEndpoint = refusalNone, time.Time{}, nil, false, false
	d.heldLocked(d.now())
	d.mu.Unlock()
	if prev == refusalNone {
		return
	}
	d.setRefusalMetric(r, false)
	changed := prev == refusalStanding
	if d.store != nil {
		wctx, cancel := d.writeContext(ctx)
		c, err := d.store.SetRefusal(wctx, r.key, breakerstore.Refusal{})
		cancel()
		if err != nil {
			d.logger.WarnContext(ctx, "delivery: record the refusal's end", slog.String("error", err.Error()))
			d.mu.Lock()
			if r.state == refusalNone {
				r.state = refusalUnknown // try again at the next success
				d.held.Store(true)
			}
			d.mu.Unlock()
			return
		}
		changed = c
	}
	if !changed {
		return
	}
	switch {
	case msg != "":
	case program:
		msg = "delivery: the request program renders rows again, and the third party accepts them"
	case r == &d.conf:
		msg = "delivery: the third party accepts the URL again"
	default:
		msg = "delivery: the third party accepts the credentials again"
	}
	d.logger.WarnContext(ctx, msg)
}

func (d *Deliverer) setRefusalMetric(r *refusal, refused bool) {
	if r == &d.creds {
		d.metrics.SetCredentialsRefused(refused)
	} else {
		d.metrics.SetMisconfigured(refused)
	}
}
