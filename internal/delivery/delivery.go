package delivery

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Client is the HTTP client of the third party.
type Client interface {
	Push(ctx context.Context, key string, items []thirdparty.Item) (*thirdparty.Result, error)
}

var _ Client = (*thirdparty.Client)(nil)

// StateWriter records facts that every daemon and `syncer status` should
// see. SetCredentials reports whether the recorded fact changed, so a
// transition is logged once, not once per attempt.
type StateWriter interface {
	SetCredentials(ctx context.Context, refused bool, message string) (changed bool, err error)
}

// Defaults for Config.
const (
	RateBurstDefault          = 1
	MaxInlineWaitDefault      = 5 * time.Second
	BreakerFailuresDefault    = 5
	BreakerOpenTimeoutDefault = 10 * time.Second
	BackoffInitialDefault     = 100 * time.Millisecond
	BackoffMaxDefault         = 5 * time.Second
	MaxElapsedDefault         = 60 * time.Second
	GaveUpSnoozeDefault       = 10 * time.Second
	AuthProbeIntervalDefault  = 30 * time.Second
)

// RetryAfterDefault is the wait after a 429 without a usable Retry-After.
const RetryAfterDefault = time.Second

// BreakerName is the circuit breaker's name. gobreaker keeps the shared
// state under BreakerStateKey and its mutex under "gobreaker:mutex:" +
// BreakerName; `syncer status` reads BreakerStateKey (status.KeyBreaker).
const (
	BreakerName     = "thirdparty"
	BreakerStateKey = "gobreaker:state:" + BreakerName
)

// stateWriteTimeout bounds a write of a shared fact.
const stateWriteTimeout = 5 * time.Second

// Config configures a Deliverer.
type Config struct {
	// RateLimit is the most requests a second sent to the third party; 0
	// means no limit. Defaults to 0.
	RateLimit float64
	// RateBurst is the limiter's burst. Defaults to RateBurstDefault.
	RateBurst int
	// MaxInlineWait is the longest 429 wait waited out inside Deliver;
	// longer ones are returned as a *WaitError. Defaults to
	// MaxInlineWaitDefault.
	MaxInlineWait time.Duration
	// BreakerFailures is how many consecutive transient failures open the
	// circuit breaker. Defaults to BreakerFailuresDefault.
	BreakerFailures int
	// BreakerOpenTimeout is how long the breaker stays open before a probe.
	// Defaults to BreakerOpenTimeoutDefault.
	BreakerOpenTimeout time.Duration
	// BackoffInitial is the first wait after a transient failure. Defaults
	// to BackoffInitialDefault.
	BackoffInitial time.Duration
	// BackoffMax bounds one wait between retries. Defaults to
	// BackoffMaxDefault.
	BackoffMax time.Duration
	// MaxElapsed bounds the retries of one batch; after it Deliver returns
	// a *WaitError wrapping ErrGaveUp. Defaults to MaxElapsedDefault.
	MaxElapsed time.Duration
	// GaveUpSnooze is the wait returned with ErrGaveUp. Defaults to
	// GaveUpSnoozeDefault.
	GaveUpSnooze time.Duration
	// AuthProbeInterval is the wait returned with ErrCredentials, so the
	// next attempt probes whether the credentials work again. Defaults to
	// AuthProbeIntervalDefault.
	AuthProbeInterval time.Duration
	// State records whether the credentials are refused; nil records
	// nothing. Defaults to nil.
	State StateWriter
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics defaults to nil, none.
	Metrics *metrics.Metrics
}

func (c *Config) withDefaults() Config {
	out := *c
	out.RateBurst = cmp.Or(c.RateBurst, RateBurstDefault)
	out.MaxInlineWait = cmp.Or(c.MaxInlineWait, MaxInlineWaitDefault)
	out.BreakerFailures = cmp.Or(c.BreakerFailures, BreakerFailuresDefault)
	out.BreakerOpenTimeout = cmp.Or(c.BreakerOpenTimeout, BreakerOpenTimeoutDefault)
	out.BackoffInitial = cmp.Or(c.BackoffInitial, BackoffInitialDefault)
	out.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	out.MaxElapsed = cmp.Or(c.MaxElapsed, MaxElapsedDefault)
	out.GaveUpSnooze = cmp.Or(c.GaveUpSnooze, GaveUpSnoozeDefault)
	out.AuthProbeInterval = cmp.Or(c.AuthProbeInterval, AuthProbeIntervalDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

func (c *Config) validate() error {
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"MaxInlineWait", c.MaxInlineWait}, {"BreakerOpenTimeout", c.BreakerOpenTimeout},
		{"BackoffInitial", c.BackoffInitial}, {"BackoffMax", c.BackoffMax}, {"MaxElapsed", c.MaxElapsed},
		{"GaveUpSnooze", c.GaveUpSnooze}, {"AuthProbeInterval", c.AuthProbeInterval},
	}
	switch {
	case c.RateLimit < 0:
		return fmt.Errorf("delivery: config: RateLimit must not be negative, got %v", c.RateLimit)
	case c.RateBurst < 0:
		return fmt.Errorf("delivery: config: RateBurst must not be negative, got %d", c.RateBurst)
	case c.BreakerFailures < 0:
		return fmt.Errorf("delivery: config: BreakerFailures must not be negative, got %d", c.BreakerFailures)
	}
	for _, f := range durations {
		if f.d < 0 {
			return fmt.Errorf("delivery: config: %s must not be negative, got %s", f.name, f.d)
		}
	}
	if c.BackoffMax != 0 && c.BackoffInitial > c.BackoffMax {
		return fmt.Errorf("delivery: config: BackoffInitial (%s) must not exceed BackoffMax (%s)", c.BackoffInitial, c.BackoffMax)
	}
	return nil
}

// Deliverer delivers batches. Create it with New.
type Deliverer struct {
	client  Client
	cfg     Config
	limiter *rate.Limiter
	logger  *slog.Logger
	metrics *metrics.Metrics
	store   gobreaker.SharedDataStore
	now     func() time.Time

	// sem serializes requests through the breaker: gobreaker holds the
	// store's mutex for the whole request, and waiting here respects ctx
	// where gobreaker's own retry of Lock sleeps blindly.
	sem chan struct{}

	mu        sync.Mutex
	breaker   *gobreaker.DistributedCircuitBreaker[struct{}]
	gateUntil time.Time // nothing is sent before it (429)
	gateErr   error     // the 429 that set gateUntil
	creds     credState
}

type credState int

const (
	credUnknown credState = iota
	credOK
	credRefused
)

// New returns a Deliverer sending through client. store keeps the circuit
// breaker's state; nil keeps it in this process only.
func New(client Client, store gobreaker.SharedDataStore, cfg *Config) (*Deliverer, error) {
	if client == nil {
		return nil, errors.New("delivery: client is required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	limit := rate.Inf
	if c.RateLimit > 0 {
		limit = rate.Limit(c.RateLimit)
	}
	if store == nil {
		store = newMemStore()
	}
	d := &Deliverer{
		client:  client,
		cfg:     c,
		limiter: rate.NewLimiter(limit, c.RateBurst),
		logger:  c.Logger,
		metrics: c.Metrics,
		store:   store,
		now:     time.Now,
		sem:     make(chan struct{}, 1),
	}
	b, err := d.newBreaker()
	if err != nil {
		return nil, err
	}
	d.breaker = b
	if st, ok := d.sharedState(); ok {
		d.metrics.SetBreakerState(int(st.State))
	}
	return d, nil
}

func (d *Deliverer) newBreaker() (*gobreaker.DistributedCircuitBreaker[struct{}], error) {
	failures := uint32(d.cfg.BreakerFailures)
	b, err := gobreaker.NewDistributedCircuitBreaker[struct{}](d.store, gobreaker.Settings{
		Name:        BreakerName,
		MaxRequests: 1,
		Timeout:     d.cfg.BreakerOpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.Is(err, errNotCounted) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			d.metrics.SetBreakerState(int(to))
			level := slog.LevelInfo
			if to == gobreaker.StateOpen {
				level = slog.LevelWarn
			}
			d.logger.Log(context.Background(), level, "delivery: circuit breaker "+to.String(),
				slog.String("from", from.String()), slog.Duration("open_timeout", d.cfg.BreakerOpenTimeout))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("delivery: circuit breaker: %w", err)
	}
	return b, nil
}

// errNotCounted marks a request error that says nothing about the third
// party's health (a 429, a refusal, our own cancellation, a wait that never
// sent): gobreaker excludes it from its counts.
var errNotCounted = errors.New("delivery: not counted by the breaker")

// Deliver pushes a batch and returns what the third party made of it. An
// error that has a RetryAfter method (*WaitError) asks the caller to try
// again after that long, with no row at fault.
func (d *Deliverer) Deliver(ctx context.Context, b Batch) (*Outcome, error) {
	out := &Outcome{}
	if len(b.Items) == 0 {
		return out, nil
	}
	if err := d.deliver(ctx, b.Salt, b.Key, b.Items, out); err != nil {
		return nil, err
	}
	return out, nil
}

// deliver pushes items under key and splits them on a whole-batch refusal.
func (d *Deliverer) deliver(ctx context.Context, salt, key string, items []thirdparty.Item, out *Outcome) error {
	res, err := d.push(ctx, key, items, out)
	if err == nil {
		apply(res, items, out)
		return nil
	}
	var we *WaitError
	var tpErr *thirdparty.Error
	if errors.As(err, &we) || !errors.As(err, &tpErr) || !tpErr.BatchRefused() {
		return err
	}
	if len(items) == 1 {
		out.Rejected = append(out.Rejected, Rejection{Item: items[0], Error: refusalText(tpErr)})
		return nil
	}
	d.logger.DebugContext(ctx, "delivery: batch refused as a whole; splitting",
		slog.String("idempotency_key", key), slog.Int("items", len(items)), slog.Int("status", tpErr.StatusCode))
	half := len(items) / 2
	for _, part := range [][]thirdparty.Item{items[:half], items[half:]} {
		if err := d.deliver(ctx, salt, thirdparty.IdempotencyKey(salt, part), part, out); err != nil {
			return err
		}
	}
	return nil
}

func apply(res *thirdparty.Result, items []thirdparty.Item, out *Outcome) {
	if res == nil || len(res.Rejected) == 0 {
		out.Accepted = append(out.Accepted, items...)
		return
	}
	rejected := make(map[int64]string, len(res.Rejected))
	for _, r := range res.Rejected {
		rejected[r.ID] = r.Error
	}
	for _, it := range items {
		if msg, ok := rejected[it.ID]; ok {
			out.Rejected = append(out.Rejected, Rejection{Item: it, Error: cmp.Or(msg, "rejected")})
		} else {
			out.Accepted = append(out.Accepted, it)
		}
	}
}

// refusalText says why a single item was refused as a whole batch: the
// status and the third party's explanation.
func refusalText(e *thirdparty.Error) string {
	msg := e.Body
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(e.Body), &body) == nil && body.Error != "" {
		msg = body.Error
	}
	const maxLen = 200
	if len(msg) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	text := "refused as a whole: " + strconv.Itoa(e.StatusCode)
	if msg != "" {
		text += " " + msg
	}
	return text
}

// push sends items under key until an answer that is not transient, with
// backoff between transient failures.
func (d *Deliverer) push(ctx context.Context, key string, items []thirdparty.Item, out *Outcome) (*thirdparty.Result, error) {
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(d.cfg.BackoffInitial),
		backoff.WithMaxInterval(d.cfg.BackoffMax),
		backoff.WithMaxElapsedTime(d.cfg.MaxElapsed),
	)
	for {
		res, err := d.attempt(ctx, key, items, out)
		if err == nil {
			d.credentialsAccepted(ctx)
			return res, nil
		}
		var we *WaitError
		if ctx.Err() != nil || errors.As(err, &we) {
			return nil, err
		}
		var tpErr *thirdparty.Error
		errors.As(err, &tpErr)
		switch thirdparty.Classify(err) {
		case thirdparty.ClassRateLimited:
			d.metrics.RateLimitedInc()
			wait := tpErr.RetryAfter
			if wait <= 0 {
				wait = RetryAfterDefault
			}
			d.closeGate(wait, err)
			d.logger.DebugContext(ctx, "delivery: rate limited by the third party",
				slog.String("idempotency_key", key), slog.Duration("retry_after", wait))
			if wait > d.cfg.MaxInlineWait {
				return nil, &WaitError{Err: err, Wait: wait}
			}
			// The next attempt waits at the gate.
		case thirdparty.ClassAuth:
			d.credentialsRefused(ctx, tpErr.StatusCode)
			return nil, &WaitError{Err: fmt.Errorf("%w: %w", ErrCredentials, err), Wait: d.cfg.AuthProbeInterval}
		case thirdparty.ClassBatchRefused:
			return nil, err
		default:
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

// attempt sends one request through the gate, the breaker and the limiter.
func (d *Deliverer) attempt(ctx context.Context, key string, items []thirdparty.Item, out *Outcome) (*thirdparty.Result, error) {
	// Wait at the gate before taking the breaker, so a long 429 wait costs
	// the store nothing.
	if err := d.waitGate(ctx); err != nil {
		return nil, err
	}
	select {
	case d.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.sem }()

	d.mu.Lock()
	breaker := d.breaker
	d.mu.Unlock()

	var (
		res    *thirdparty.Result
		reqErr error
		ran    bool
	)
	_, err := breaker.Execute(func() (struct{}, error) {
		ran = true
		// Checked again right before sending: the limiter's wait may
		// outlast a gate closed meanwhile.
		if reqErr = d.waitGate(ctx); reqErr != nil {
			return struct{}{}, errNotCounted
		}
		if reqErr = d.limiter.Wait(ctx); reqErr != nil {
			reqErr = fmt.Errorf("delivery: rate limit: %w", reqErr)
			return struct{}{}, errNotCounted
		}
		if reqErr = d.waitGate(ctx); reqErr != nil {
			return struct{}{}, errNotCounted
		}
		out.Requests++
		res, reqErr = d.client.Push(ctx, key, items)
		if reqErr != nil && !countsAsFailure(ctx, reqErr) {
			return struct{}{}, errNotCounted
		}
		return struct{}{}, reqErr
	})
	if ran {
		if err != nil && !errors.Is(err, errNotCounted) && !errors.Is(err, reqErr) {
			// The request ran but its result could not be stored; what
			// the third party answered still stands.
			d.logger.WarnContext(ctx, "delivery: circuit breaker store", slog.String("error", err.Error()))
		}
		return res, reqErr
	}
	switch {
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, &WaitError{Err: ErrBreakerOpen, Wait: d.breakerWait()}
	case errors.Is(err, gobreaker.ErrNoSharedState):
		// The state row went missing (or could not be read): start afresh.
		if b, nerr := d.newBreaker(); nerr == nil {
			d.mu.Lock()
			d.breaker = b
			d.mu.Unlock()
		}
		return nil, fmt.Errorf("delivery: circuit breaker state: %w", err)
	default:
		return nil, fmt.Errorf("delivery: circuit breaker: %w", err)
	}
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

// breakerWait is how long until the breaker may let a probe through, read
// from the shared state so it holds whichever daemon opened it.
func (d *Deliverer) breakerWait() time.Duration {
	const minWait = 100 * time.Millisecond
	st, ok := d.sharedState()
	if !ok {
		return d.cfg.BreakerOpenTimeout
	}
	d.metrics.SetBreakerState(int(st.State))
	if st.State != gobreaker.StateOpen {
		return minWait // half-open with a probe under way
	}
	return max(st.Expiry.Sub(d.now()), minWait)
}

func (d *Deliverer) sharedState() (gobreaker.SharedState, bool) {
	var st gobreaker.SharedState
	data, err := d.store.GetData(BreakerStateKey)
	if err != nil || len(data) == 0 || json.Unmarshal(data, &st) != nil {
		return st, false
	}
	return st, true
}

// closeGate lets nothing through for wait.
func (d *Deliverer) closeGate(wait time.Duration, cause error) {
	until := d.now().Add(wait)
	d.mu.Lock()
	defer d.mu.Unlock()
	if until.After(d.gateUntil) {
		d.gateUntil, d.gateErr = until, cause
	}
}

// waitGate returns once the 429 gate is open, waiting at most
// MaxInlineWait; a longer wait is returned as a *WaitError at once.
func (d *Deliverer) waitGate(ctx context.Context) error {
	for {
		d.mu.Lock()
		wait, cause := d.gateUntil.Sub(d.now()), d.gateErr
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
}

func (d *Deliverer) credentialsRefused(ctx context.Context, status int) {
	msg := fmt.Sprintf("third party answered %d", status)
	if d.setCredentials(ctx, credRefused, msg) {
		d.logger.ErrorContext(ctx, "delivery: the third party refused the credentials; pushing is stopped until it accepts them (check SYNCER_THIRDPARTY_TOKEN)",
			slog.Int("status", status), slog.Duration("probe_every", d.cfg.AuthProbeInterval))
	}
}

func (d *Deliverer) credentialsAccepted(ctx context.Context) {
	d.mu.Lock()
	ok := d.creds == credOK
	d.mu.Unlock()
	if ok {
		return
	}
	if d.setCredentials(ctx, credOK, "") {
		d.logger.InfoContext(ctx, "delivery: credentials accepted again")
	}
}

// setCredentials records the credentials' state and reports whether that
// is a change: of the shared fact when there is a StateWriter, else of this
// process's view.
func (d *Deliverer) setCredentials(ctx context.Context, s credState, msg string) bool {
	d.mu.Lock()
	prev := d.creds
	d.creds = s
	d.mu.Unlock()
	local := prev != s && (prev != credUnknown || s == credRefused)
	if d.cfg.State == nil {
		return local
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateWriteTimeout)
	defer cancel()
	changed, err := d.cfg.State.SetCredentials(wctx, s == credRefused, msg)
	if err != nil {
		d.logger.WarnContext(ctx, "delivery: record credentials state", slog.String("error", err.Error()))
		if s == credOK {
			// Try again at the next success.
			d.mu.Lock()
			d.creds = credUnknown
			d.mu.Unlock()
		}
		return local
	}
	return changed
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
