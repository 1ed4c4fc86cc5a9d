package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// observe takes in what an answer says beyond its items: its status for
// the metrics, a quota, a 429's pause or the rate to slow down to, the
// last error.
func (d *Deliverer) observe(ctx context.Context, key string, sentAt time.Time, res *thirdparty.Result, err error, acceptedAny bool) {
	var tpErr *thirdparty.Error
	errors.As(err, &tpErr)
	status := 0
	switch {
	case err == nil:
		status = http.StatusOK
	case tpErr != nil:
		status = tpErr.StatusCode
	}
	if err != nil && tpErr == nil {
		return // not an answer: our own cancellation or the like
	}
	if tpErr != nil && status == 0 && ctx.Err() != nil && !tpErr.Timeout {
		return // our caller cancelled the request
	}
	if tpErr == nil || tpErr.TokenEndpoint == "" {
		// A token endpoint's failure sent the destination nothing: no
		// answer of the destination's to count.
		d.metrics.Response(status)
	}

	quota := thirdparty.Quota{}
	if res != nil {
		quota = res.Quota
	} else if tpErr != nil {
		quota = tpErr.Quota
	}
	if quota.Known {
		if until, ok := d.pacer.observeQuota(quota, len(d.slots)-1); ok {
			wait, capped := d.capWait(quota.Reset)
			if capped || quota.Reset <= 0 {
				until = d.now().Add(wait)
			}
			text := "quota used up (remaining 0, reset in " + quota.Reset.Round(time.Millisecond).String() + ")"
			if capped {
				d.logger.WarnContext(ctx, "delivery: the third party's quota reset is too far; pausing for MaxRetryAfter only",
					slog.Duration("reset", quota.Reset), slog.Duration("max_retry_after", d.cfg.MaxRetryAfter))
			}
			d.setPause(ctx, until, fmt.Errorf("%w: %s", ErrPaused, text), text, pauseQuota)
		}
	}

	if err == nil {
		d.metrics.LastSuccess(d.now())
		d.answered(acceptedAny)
		d.accepted(ctx, acceptedAny)
		d.succeeded(ctx)
		d.rateChanged(ctx, d.pacer.succeeded(sentAt))
		return
	}

	if tpErr.TokenEndpoint == "" && !tpErr.AuthRefused() {
		d.granted(ctx)
	}
	if tpErr.RateLimited() {
		d.metrics.RateLimitedInc()
		switch {
		case tpErr.RetryAfter > 0:
			wait, capped := d.capWait(tpErr.RetryAfter)
			if capped {
				d.logger.WarnContext(ctx, "delivery: the third party asked for a pause longer than MaxRetryAfter; pausing for MaxRetryAfter only",
					slog.String("retry_after", tpErr.RetryAfterRaw), slog.Duration("max_retry_after", d.cfg.MaxRetryAfter))
			}
			text := "429 Retry-After: " + tpErr.RetryAfterRaw
			d.setPause(ctx, d.now().Add(wait), fmt.Errorf("%w: %w", ErrPaused, tpErr), text, pauseRetryAfter)
		case quota.Known && quota.Remaining == 0:
			// The quota's pause is set above.
		default:
			// A bare 429: the third party's limit is below our rate.
			d.rateChanged(ctx, d.pacer.limited(sentAt))
		}
	}
	d.failed(ctx, key, status, tpErr)
}

// capWait caps a wait the third party asked for at MaxRetryAfter.
func (d *Deliverer) capWait(wait time.Duration) (time.Duration, bool) {
	if wait <= 0 {
		return RetryAfterDefault, false
	}
	if wait > d.cfg.MaxRetryAfter {
		return d.cfg.MaxRetryAfter, true
	}
	return wait, false
}

// failed records the last error (in the store when its text changed or
// every lastErrorEvery) and logs a failure at warn once per kind, again
// after warnEvery; the states with their own lines (refusals, pauses, the
// breaker) are not logged here.
func (d *Deliverer) failed(ctx context.Context, key string, status int, tpErr *thirdparty.Error) {
	kind := thirdparty.Classify(tpErr).String() + ":" + strconv.Itoa(status)
	if tpErr.BadAnswer != "" {
		kind += ":bad"
	}
	text := tpErr.Error()
	warn := d.lastError(ctx, text, status, kind)
	var msg string
	switch {
	case tpErr.BadAnswer != "":
		msg = "delivery: the third party answered 2xx with a body that is not an answer; nothing is taken as accepted, retrying under the same key"
	case tpErr.BatchRefused():
		msg = "delivery: the third party refused a batch as a whole; splitting it"
	case tpErr.RateLimited(), tpErr.AuthRefused(), tpErr.ConfigRefused():
		return // logged where the state changes
	default:
		msg = "delivery: the third party failed; retrying with backoff"
	}
	level := slog.LevelDebug
	if warn {
		level = slog.LevelWarn
	}
	d.logger.Log(ctx, level, msg, slog.Int("status", status), slog.String("idempotency_key", key), slog.String("answer", text))
}

// lastError records text as the last error (in the store when its text
// changed or every lastErrorEvery) and says whether a failure of this
// kind is to be logged at warn (once per kind, again after warnEvery).
func (d *Deliverer) lastError(ctx context.Context, text string, status int, kind string) (warn bool) {
	now := d.now()
	d.mu.Lock()
	d.failure = breakerstore.LastError{Text: text, Status: status, At: now.UTC()}
	d.clean.Store(false)
	failure := d.failure
	write := d.store != nil && (text != d.written.Text || now.Sub(d.written.At) >= lastErrorEvery)
	if write {
		d.written = failure
	}
	warn = kind != d.warned || now.Sub(d.warnedAt) >= warnEvery
	if warn {
		d.warned, d.warnedAt = kind, now
	}
	d.mu.Unlock()
	if write {
		wctx, cancel := d.writeContext(ctx)
		if err := d.store.SetLastError(wctx, failure); err != nil {
			d.logger.WarnContext(ctx, "delivery: record the last error", slog.String("error", err.Error()))
		}
		cancel()
	}
	return warn
}

// programFailed records a format's program that failed at run time (a jq
// body): no request was sent, nothing is marked, the batch goes again.
func (d *Deliverer) programFailed(ctx context.Context, err error) {
	text := "format: " + thirdparty.SafeText(err.Error())
	level := slog.LevelDebug
	if d.lastError(ctx, text, 0, "program") {
		level = slog.LevelWarn
	}
	d.logger.Log(ctx, level, "delivery: a program of the destination's format failed; nothing sent, retrying with backoff",
		slog.String("error", text))
}

// lastFailure is the last failure seen by this process.
func (d *Deliverer) lastFailure() breakerstore.LastError {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failure
}
