package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// errNotCounted marks a request error that says nothing about the third
// party's health (a 429, a refusal, our own cancellation): the breaker
// excludes it from its counts.
var errNotCounted = errors.New("delivery: not counted by the breaker")

func (d *Deliverer) newBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(d.cfg.BackoffInitial),
		backoff.WithMaxInterval(d.cfg.BackoffMax),
		backoff.WithMaxElapsedTime(d.cfg.MaxElapsed),
	)
}

// push sends r under key until an answer that is not transient, with
// backoff between transient failures.
func (d *Deliverer) push(ctx context.Context, key string, r *thirdparty.Request, out *Outcome) (*thirdparty.Result, error) {
	var bo *backoff.ExponentialBackOff // made at the first failure: most requests have none
	for {
		res, err := d.attempt(ctx, key, r, out)
		if err == nil {
			return res, nil
		}
		var we *WaitError
		if ctx.Err() != nil || errors.As(err, &we) || errors.Is(err, ErrWithdrawn) {
			return nil, err
		}
		var tpErr *thirdparty.Error
		errors.As(err, &tpErr)
		switch thirdparty.Classify(err) {
		case thirdparty.ClassRateLimited:
			// observe paused or slowed down; the next attempt waits for it.
			if wait := d.pauseLeft(); wait > d.cfg.MaxInlineWait {
				return nil, &WaitError{Err: fmt.Errorf("%w: %w", ErrPaused, err), Wait: wait}
			}
		case thirdparty.ClassAuth:
			if tpErr.TokenEndpoint != "" {
				return nil, d.refused(ctx, &d.creds, tpErr,
					"delivery: the token endpoint refused "+tpErr.RefusedCredential()+", no request was sent; nothing is sent until a probe succeeds (check "+d.cfg.CredentialsSetting+")")
			}
			return nil, d.refused(ctx, &d.creds, tpErr,
				"delivery: the third party refused the credentials; nothing is sent until a probe succeeds (check "+d.cfg.CredentialsSetting+")")
		case thirdparty.ClassConfig:
			if itemAbsent(r, tpErr) {
				d.probeAgain()
				return nil, &absentError{tpErr: tpErr}
			}
			return nil, d.refused(ctx, &d.conf, tpErr,
				"delivery: the third party's URL is misconfigured (a redirect, 404 or 410); nothing is sent until a probe succeeds (check "+d.cfg.URLSetting+")")
		case thirdparty.ClassBatchRefused:
			return nil, err
		default:
			if bo == nil {
				bo = d.newBackoff()
			}
			next := bo.NextBackOff()
			if next == backoff.Stop {
				d.logger.WarnContext(ctx, "delivery: giving up on a batch after transient failures",
					slog.String("idempotency_key", key), slog.Duration("max_elapsed", d.cfg.MaxElapsed), slog.String("error", err.Error()))
				return nil, &WaitError{Err: fmt.Errorf("%w: %w", ErrGaveUp, err), Wait: d.cfg.GaveUpSnooze}
			}
			d.logger.DebugContext(ctx, "delivery: transient failure; retrying",
				slog.String("idempotency_key", key), slog.Duration("in", next), slog.String("error", err.Error()))
			if err := sleep(ctx, next); err != nil {
				return nil, err
			}
		}
	}
}

// attempt sends one request once the refusals, the pause, an in-flight slot,
// the pacer and the breaker let it.
func (d *Deliverer) attempt(ctx context.Context, key string, r *thirdparty.Request, out *Outcome) (*thirdparty.Result, error) {
	d.loadShared(ctx)
	for {
		if err := d.checkHold(); err != nil {
			return nil, err
		}
		if err := d.checkRefusals(); err != nil {
			return nil, err
		}
		if err := d.waitPause(ctx); err != nil {
			return nil, err
		}
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		res, err, again := d.send(ctx, key, r, out)
		<-d.slots
		if !again {
			return res, err
		}
		if errors.Is(err, errProbing) {
			// Another request probes the half-open breaker: wait for its
			// answer, within reason.
			t := time.NewTimer(d.cfg.MaxInlineWait)
			select {
			case <-d.breaker.waitSettled():
				t.Stop()
			case <-t.C:
				return nil, &WaitError{Err: ErrBreakerOpen, Wait: minBreakerWait}
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
	}
}

// send sends one request while holding an in-flight slot. again asks the
// caller to give the slot up and start over (a pause began meanwhile, or
// the breaker's probe is under way: err is then errProbing).
func (d *Deliverer) send(ctx context.Context, key string, r *thirdparty.Request, out *Outcome) (res *thirdparty.Result, err error, again bool) {
	if until, ok := d.pacer.quotaUsed(); ok {
		d.setPause(ctx, until, fmt.Errorf("%w: the third party's quota is used up until its reset", ErrPaused), "", pauseBudget)
		return nil, nil, true
	}
	w := withdrawalOf(ctx)
	if err := d.pacer.waitOr(ctx, w); err != nil {
		if errors.Is(err, ErrWithdrawn) {
			return nil, err, false
		}
		return nil, fmt.Errorf("delivery: rate limit: %w", err), false
	}
	// The limiter's wait may outlast a pause that began meanwhile.
	if d.pauseLeft() > 0 {
		return nil, nil, true
	}
	if !w.sending() {
		// Another request of the batch was withdrawn meanwhile.
		return nil, ErrWithdrawn, false
	}
	done, err := d.breaker.allow()
	if err != nil {
		return nil, err, errors.Is(err, errProbing)
	}
	sentAt := d.pacer.sent()
	out.Requests++
	d.metrics.RequestStarted()
	start := d.now()
	res, err = d.client.Send(ctx, key, r, func(a *thirdparty.Answer) (*thirdparty.Result, error) { return d.format.Read(r, a) })
	d.metrics.RequestEnded()
	out.Attempts = append(out.Attempts, attemptOf(key, start, d.now().Sub(start), r, res, err))
	switch {
	case err == nil:
		done(nil)
	case countsAsFailure(ctx, err):
		done(err)
	default:
		done(errNotCounted)
	}
	d.breakerChanged(ctx)
	d.observe(ctx, key, sentAt, res, err, acceptsAny(res, len(r.Items)))
	d.answerProbe(ctx, err)
	return res, err, false
}

// attemptOf is what one request's answer adds to the row's story.
func attemptOf(key string, at time.Time, took time.Duration, r *thirdparty.Request, res *thirdparty.Result, err error) Attempt {
	a := Attempt{Key: key, At: at, Latency: took, Items: r.Items}
	if res != nil {
		a.Status = res.Status
	}
	if err != nil {
		var e *thirdparty.Error
		if errors.As(err, &e) {
			a.Status = e.StatusCode
		}
		a.Reason = thirdparty.SafeText(err.Error())
	}
	return a
}

// acceptsAny reports whether an answer accepted any of the n items its
// request carried: not when it rejected or left pending every one.
func acceptsAny(res *thirdparty.Result, n int) bool {
	return res == nil || len(res.Rejected)+len(res.Pending) < max(n, 1)
}

// countsAsFailure says whether a push error is a transient failure of the
// third party, the kind that trips the breaker.
func countsAsFailure(ctx context.Context, err error) bool {
	var e *thirdparty.Error
	if !errors.As(err, &e) || !e.Transient() {
		return false
	}
	// A push our caller cancelled says nothing about the third party.
	return !(e.StatusCode == 0 && !e.Timeout && ctx.Err() != nil)
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
