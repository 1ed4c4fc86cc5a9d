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

// writeContext bounds a write of a shared fact; it runs even when ctx is
// being cancelled, since what the third party said still stands.
func (d *Deliverer) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), stateWriteTimeout)
}

// loadShared reads the shared facts, at most once per loadEvery, and takes
// what another daemon recorded: its pause, its open breaker and, the first
// time, the rate it learnt.
func (d *Deliverer) loadShared(ctx context.Context) {
	if d.store == nil {
		return
	}
	now := d.now()
	at := d.loadedAt.Load()
	if at != 0 && now.UnixNano()-at < int64(loadEvery) {
		return // read not long ago: the common case
	}
	if !d.loadedAt.CompareAndSwap(at, now.UnixNano()) {
		return // another request reads them
	}
	first := at == 0

	st, err := d.store.Load(ctx)
	if err != nil {
		// Pushing goes on with what this process knows.
		d.logger.WarnContext(ctx, "delivery: read the shared state", slog.String("error", err.Error()))
		return
	}
	d.adoptPerson(ctx, st, first)
	inherited := d.breaker.adopt(st.Breaker)
	if state, until := d.breaker.state(); !until.IsZero() || inherited {
		d.metrics.SetBreakerState(int(state))
		if inherited {
			d.mu.Lock()
			if d.failure.Text == "" {
				// The cause the breaker's next line names, until this
				// process sees one of its own.
				d.failure = st.LastError
			}
			d.mu.Unlock()
			d.logger.WarnContext(ctx, "delivery: circuit breaker taken over from the shared state: nothing is sent before its open period ends, then one probe",
				slog.String("state", state.String()), slog.Time("open_until", until), slog.Int("status", st.LastError.Status), slog.String("last_error", st.LastError.Text))
		}
	}
	if st.Pause.Active(now) {
		d.mu.Lock()
		if st.Pause.Until.After(d.pause.until) {
			d.pause.until = st.Pause.Until
			d.pause.err = fmt.Errorf("%w: %s", ErrPaused, st.Pause.Cause)
			d.heldLocked(now)
		}
		if st.Pause.Until.After(d.pause.stored) {
			d.pause.stored = st.Pause.Until
		}
		d.mu.Unlock()
	}
	if d.pacer.yield(st.VerifyShare.Active(now)) {
		d.logger.InfoContext(ctx, "delivery: the share of the request rate a syncer verify from the command line takes changed; this process sends at the rest",
			slog.Float64("share", st.VerifyShare.Active(now)), slog.Float64("requests_per_second", d.pacer.limit()))
		d.metrics.SetRateLimit(d.pacer.limit())
	}
	if first && st.Rate.Limit > 0 {
		if d.pacer.adopt(st.Rate.Limit, st.Rate.Ceiling) {
			d.logger.InfoContext(ctx, "delivery: request rate taken over from the shared state",
				slog.Float64("requests_per_second", st.Rate.Limit), slog.Float64("ceiling", st.Rate.Ceiling))
			d.metrics.SetRateLimit(d.pacer.limit())
		}
	}
}

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
		d.mu.Lock()
		prev, program := r.state, errors.Is(r.err, ErrProgram)
		if prev == refusalStanding && r.storm && !acceptedAny {
			d.mu.Unlock()
			continue // the storm goes on: every item rejected again
		}
		r.state, r.until, r.err, r.storm = refusalNone, time.Time{}, nil, false
		d.heldLocked(d.now())
		d.mu.Unlock()
		if prev == refusalNone {
			continue
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
				continue
			}
			changed = c
		}
		if changed {
			msg := "delivery: the third party accepts the credentials again"
			switch {
			case program:
				msg = "delivery: the request program renders rows again, and the third party accepts them"
			case r == &d.conf:
				msg = "delivery: the third party accepts the URL again"
			}
			d.logger.WarnContext(ctx, msg)
		}
	}
}

func (d *Deliverer) setRefusalMetric(r *refusal, refused bool) {
	if r == &d.creds {
		d.metrics.SetCredentialsRefused(refused)
	} else {
		d.metrics.SetMisconfigured(refused)
	}
}

// pauseLeft is how long the pause still holds.
func (d *Deliverer) pauseLeft() time.Duration {
	if !d.held.Load() {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pause.until.Sub(d.now())
}

// heldLocked sets held from what it stands for, forgetting a pause that
// has ended.
func (d *Deliverer) heldLocked(now time.Time) {
	if !d.pause.until.After(now) {
		d.pause.until = time.Time{}
	}
	d.held.Store(!d.pause.until.IsZero() || d.creds.state != refusalNone || d.conf.state != refusalNone)
}

// waitPause returns once no pause holds, waiting at most MaxInlineWait; a
// longer pause is returned as a *WaitError at once.
func (d *Deliverer) waitPause(ctx context.Context) error {
	for d.held.Load() {
		now := d.now()
		d.mu.Lock()
		wait, cause := d.pause.until.Sub(now), d.pause.err
		d.heldLocked(now)
		d.mu.Unlock()
		if wait <= 0 {
			return nil
		}
		if wait > d.cfg.MaxInlineWait {
			return &WaitError{Err: cause, Wait: wait}
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
	return nil
}

// pauseKind says who asked for a pause.
type pauseKind int

const (
	// pauseBudget: this process's count of the quota says nothing is left.
	pauseBudget pauseKind = iota
	// pauseQuota: an answer said nothing of the quota remains.
	pauseQuota
	// pauseRetryAfter: a 429 with Retry-After.
	pauseRetryAfter
)

// setPause lets nothing through before until. A pause the third party asked
// for is written to the store, so another daemon honours it, and its
// beginning is logged: at warn for a Retry-After, at info for a quota used
// up (the expected end of every window when the quota is what limits).
func (d *Deliverer) setPause(ctx context.Context, until time.Time, cause error, text string, kind pauseKind) {
	now := d.now()
	d.mu.Lock()
	if !until.After(d.pause.until) {
		d.mu.Unlock()
		return
	}
	began := !d.pause.until.After(now)
	d.pause.until, d.pause.err = until, cause
	d.held.Store(true)
	write := kind != pauseBudget && d.store != nil && until.Sub(d.pause.stored) >= time.Second
	if write {
		d.pause.stored = until
	}
	d.mu.Unlock()
	if began && kind != pauseBudget {
		level := slog.LevelWarn
		if kind == pauseQuota {
			level = slog.LevelInfo
		}
		d.logger.Log(ctx, level, "delivery: the third party asked for a pause; nothing is sent until it ends",
			slog.Duration("pause", until.Sub(now)), slog.Time("until", until), slog.String("cause", text))
	}
	if write {
		wctx, cancel := d.writeContext(ctx)
		defer cancel()
		if err := d.store.SetPause(wctx, breakerstore.Pause{Until: until.UTC(), Cause: text, Status: http.StatusTooManyRequests}); err != nil {
			d.logger.WarnContext(ctx, "delivery: record the pause", slog.String("error", err.Error()))
		}
	}
}

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

// rateChanged publishes a change of the learnt rate: the metric, a log
// line when it moved by more than half (at warn when it went down) or when
// the third party's limit was found, and the store now and then.
func (d *Deliverer) rateChanged(ctx context.Context, ch rateChange) {
	if !ch.changed {
		return
	}
	d.metrics.SetRateLimit(ch.limit)
	switch {
	case ch.found:
		d.logger.InfoContext(ctx, "delivery: the third party's unannounced limit found; holding near it and probing past it",
			slog.String("ceiling", rateText(ch.ceiling)), slog.String("from", rateText(ch.from)), slog.String("to", rateText(ch.learned)))
	case ch.log:
		level := slog.LevelInfo
		if ch.learned < ch.from {
			level = slog.LevelWarn
		}
		d.logger.Log(ctx, level, "delivery: request rate changed by more than half",
			slog.String("from", rateText(ch.from)), slog.String("to", rateText(ch.learned)),
			slog.String("ceiling", rateText(ch.ceiling)), slog.String("phase", ch.phase.String()), slog.String("cause", ch.cause))
	}
	if ch.store && d.store != nil {
		wctx, cancel := d.writeContext(ctx)
		defer cancel()
		r := breakerstore.Rate{Limit: finite(ch.learned), Ceiling: finite(ch.ceiling), Phase: ch.phase.String()}
		if err := d.store.SetRate(wctx, r); err != nil {
			d.logger.WarnContext(ctx, "delivery: record the learnt rate", slog.String("error", err.Error()))
		}
	}
}
