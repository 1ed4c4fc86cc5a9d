package delivery

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/syncer-dev/syncer/internal/breakerstore"
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
	d.mu.Lock()
	if d.creds.state == refusalUnknown {
		d.creds.storedByEndpoint = st.Credentials.Refused && st.Credentials.TokenEndpoint != ""
	}
	d.mu.Unlock()
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
