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
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Client is the HTTP client of the third party.
type Client interface {
	Send(ctx context.Context, key string, r *thirdparty.Request, read func(*thirdparty.Answer) (*thirdparty.Result, error)) (*thirdparty.Result, error)
}

// Format is a destination format (internal/formats/...): how a batch
// becomes requests and how an answer to one is read. Everything else (keys,
// limits, pauses, the breaker, backoff, splits, refusals) is the
// Deliverer's and holds for every format.
type Format interface {
	// Requests makes the requests of a batch: one for the whole batch, or
	// one per item. It must be deterministic: the same batch always gives
	// the same requests, byte for byte, so a resend is the same body. An
	// error is a program that failed at run time: retried, never a
	// rejection.
	Requests(b *thirdparty.Batch) ([]thirdparty.Request, error)
	// Read says what an answer to r made of its items: accepted, rejected,
	// pending, or an error (the answer's refusal by the common rules, or
	// not an answer at all).
	Read(r *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error)
}

// Canonical is the optional capability of a Format whose one request of
// a whole batch has the recorded body itself (the syncer format's
// thirdparty.AppendBatch): a recorded batch goes as recorded, without being
// encoded again.
type Canonical interface {
	CanonicalRequest(items []thirdparty.Item, body []byte) thirdparty.Request
}

var _ Client = (*thirdparty.Client)(nil)

// Store keeps the facts every daemon must share (internal/breakerstore owns
// them): a Deliverer reads them before sending, so a fresh process honours
// a pause or an open breaker another one recorded, and writes what it
// learns.
type Store interface {
	Load(ctx context.Context) (breakerstore.State, error)
	SetBreaker(ctx context.Context, b breakerstore.Breaker) error
	SetPause(ctx context.Context, p breakerstore.Pause) error
	SetRate(ctx context.Context, r breakerstore.Rate) error
	SetLastError(ctx context.Context, e breakerstore.LastError) error
	SetRefusal(ctx context.Context, key string, r breakerstore.Refusal) (changed bool, err error)
}

var (
	_ Store = (*breakerstore.Shared)(nil)
	_ Store = (*breakerstore.Store)(nil)
)

// Defaults for Config.
const (
	RateBurstDefault          = 1
	MaxInFlightDefault        = 4
	MaxInlineWaitDefault      = 5 * time.Second
	MaxRetryAfterDefault      = 15 * time.Minute
	BreakerFailuresDefault    = 5
	BreakerOpenTimeoutDefault = 10 * time.Second
	BackoffInitialDefault     = 100 * time.Millisecond
	BackoffMaxDefault         = 5 * time.Second
	MaxElapsedDefault         = 60 * time.Second
	GaveUpSnoozeDefault       = 10 * time.Second
	AuthProbeIntervalDefault  = 30 * time.Second
	// CredentialsSettingDefault and URLSettingDefault are the settings of
	// the export of resources, named when the third party refuses them.
	CredentialsSettingDefault = "SYNCER_THIRDPARTY_TOKEN"
	URLSettingDefault         = "SYNCER_THIRDPARTY_URL"
)

// RetryAfterDefault is the pause after an answer that says the quota is used
// up without saying when it comes back.
const RetryAfterDefault = time.Second

// Timings that are policy, not configuration.
const (
	// stateWriteTimeout bounds a write of a shared fact.
	stateWriteTimeout = 5 * time.Second
	// loadEvery is how often the shared facts are read again.
	loadEvery = time.Second
	// lastErrorEvery is how often the same last error is written again,
	// so its time stays fresh without a write per failed request.
	lastErrorEvery = 5 * time.Second
	// warnEvery is how often the same kind of failure is logged again at
	// warn; in between it is logged at debug.
	warnEvery = 30 * time.Second
)

// Config configures a Deliverer: one destination's settings.
type Config struct {
	// Name is the destination's name: its metrics' destination label.
	// Defaults to metrics.DefaultDestination, the export of resources.
	Name string
	// CredentialsSetting names where the destination's credentials come
	// from (a token_env's variable), for the log line that says they are
	// refused. Defaults to CredentialsSettingDefault.
	CredentialsSetting string
	// URLSetting names where the destination's URL comes from, for the log
	// line that says it is refused. Defaults to URLSettingDefault.
	URLSetting string
	// Installation is the installation's id (created by `syncer migrate`);
	// it derives the Idempotency-Keys of split halves and of batches given
	// without a key, so two installations never share a key. Required: an
	// empty one would make every installation's keys collide. Defaults to
	// "" (invalid).
	Installation string
	// RateLimit is the most requests a second sent to the third party; 0
	// means no limit but what is learnt from its answers. Defaults to 0.
	RateLimit float64
	// RateBurst is the limiter's burst. Defaults to RateBurstDefault.
	RateBurst int
	// MaxInFlight is the most requests unanswered at once through this
	// Deliverer, retries and split halves included. Defaults to
	// MaxInFlightDefault.
	MaxInFlight int
	// MaxInlineWait is the longest wait (a pause, an open breaker's probe)
	// waited out inside Deliver; longer ones are returned as a *WaitError.
	// Defaults to MaxInlineWaitDefault.
	MaxInlineWait time.Duration
	// MaxRetryAfter caps the pause a 429's Retry-After (or a quota's reset)
	// asks for; a longer one is cut to it and logged at warn. Defaults to
	// MaxRetryAfterDefault.
	MaxRetryAfter time.Duration
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
	// AuthProbeInterval is how long nothing is sent after the third party
	// refused the credentials or the URL (the wait returned with
	// ErrCredentials or ErrConfiguration); then one request probes.
	// Defaults to AuthProbeIntervalDefault.
	AuthProbeInterval time.Duration
	// Format makes the requests and reads the answers (formats.New builds
	// one). Required.
	Format Format
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics are the destination's own series (metrics.Metrics.Destination).
	// Defaults to nil, none.
	Metrics *metrics.Destination
}

func (c *Config) withDefaults() Config {
	out := *c
	out.Name = cmp.Or(c.Name, metrics.DefaultDestination)
	out.CredentialsSetting = cmp.Or(c.CredentialsSetting, CredentialsSettingDefault)
	out.URLSetting = cmp.Or(c.URLSetting, URLSettingDefault)
	out.RateBurst = cmp.Or(c.RateBurst, RateBurstDefault)
	out.MaxInFlight = cmp.Or(c.MaxInFlight, MaxInFlightDefault)
	out.MaxInlineWait = cmp.Or(c.MaxInlineWait, MaxInlineWaitDefault)
	out.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, MaxRetryAfterDefault)
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
	if c.Format == nil {
		return errors.New("delivery: Config.Format is required (formats.New builds one)")
	}
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"MaxInlineWait", c.MaxInlineWait}, {"MaxRetryAfter", c.MaxRetryAfter},
		{"BreakerOpenTimeout", c.BreakerOpenTimeout},
		{"BackoffInitial", c.BackoffInitial}, {"BackoffMax", c.BackoffMax}, {"MaxElapsed", c.MaxElapsed},
		{"GaveUpSnooze", c.GaveUpSnooze}, {"AuthProbeInterval", c.AuthProbeInterval},
	}
	switch {
	case c.Installation == "":
		return errors.New("delivery: config: Installation is required")
	case c.RateLimit < 0:
		return fmt.Errorf("delivery: config: RateLimit must not be negative, got %v", c.RateLimit)
	case c.RateBurst < 0:
		return fmt.Errorf("delivery: config: RateBurst must not be negative, got %d", c.RateBurst)
	case c.MaxInFlight < 0:
		return fmt.Errorf("delivery: config: MaxInFlight must not be negative, got %d", c.MaxInFlight)
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
	client Client
	format Format
	// canonical is the format's, when its request of a whole batch is the
	// recorded body itself; nil otherwise.
	canonical Canonical
	store     Store // nil: the facts live in this process only
	cfg       Config
	logger    *slog.Logger
	metrics   *metrics.Destination
	now       func() time.Time

	slots chan struct{} // one per request unanswered
	// places and admission order the workers of batches of many requests
	// (see admit): one place per worker, one batch admitted at a time.
	places, admission chan struct{}
	pacer             *pacer
	breaker           *breaker

	// held is set, under mu, while a pause or a refusal that is not known
	// to be none may hold requests back (as refusals are, until the first
	// success): requests look under mu only then. Requests go 16 at a time
	// and more, and would otherwise take turns at mu four times each.
	held atomic.Bool
	// loadedAt is when the shared facts were last read, in Unix
	// nanoseconds; 0 until they are read once (and the learnt rate
	// adopted). The request that moves it reads them.
	loadedAt atomic.Int64
	// clean is set while no failure was seen since the last error was
	// cleared (see succeeded); unset, the first success clears it.
	clean atomic.Bool
	// hold is set while a person paused the destination; probedAt is the
	// time of the last probe a person asked for, in Unix nanoseconds
	// (hold.go).
	hold     atomic.Bool
	probedAt atomic.Int64

	mu    sync.Mutex
	pause pause
	creds refusal
	conf  refusal
	// streak is the batches rejected whole for one reason in a row
	// (storm.go).
	streak   streak
	failure  breakerstore.LastError // the last failure seen
	written  breakerstore.LastError // the last failure written to the store
	warned   string                 // the kind of failure last logged at warn
	warnedAt time.Time
}

// pause is a time before which nothing is sent.
type pause struct {
	until time.Time
	err   error // what to wrap in the *WaitError
	// stored is the latest pause written to (or read from) the store.
	stored time.Time
}

// refusal is a standing refusal (credentials or configuration).
type refusal struct {
	key      string // breakerstore key
	sentinel error
	state    refusalState
	until    time.Time // nothing is sent before it; then one probe goes
	err      error
	// storm marks a rejection storm's hold: an answer that rejects every
	// item it carried says nothing new, and only one that accepts an
	// item ends it (an answer at all ends the others).
	storm bool
}

type refusalState int

const (
	refusalUnknown refusalState = iota // the store may hold an old refusal
	refusalNone
	refusalStanding
)

// New returns a Deliverer sending through client. store keeps the shared
// facts (internal/breakerstore); nil keeps them in this process only.
func New(client Client, store Store, cfg *Config) (*Deliverer, error) {
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
	d := &Deliverer{
		client:    client,
		format:    c.Format,
		store:     store,
		cfg:       c,
		logger:    c.Logger,
		metrics:   c.Metrics,
		now:       time.Now,
		slots:     make(chan struct{}, c.MaxInFlight),
		places:    make(chan struct{}, c.MaxInFlight),
		admission: make(chan struct{}, 1),
		creds:     refusal{key: breakerstore.KeyCredentials, sentinel: ErrCredentials},
		conf:      refusal{key: breakerstore.KeyConfiguration, sentinel: ErrConfiguration},
	}
	if cf, ok := c.Format.(Canonical); ok {
		d.canonical = cf
	}
	d.held.Store(true)
	d.pacer = newPacer(c.RateLimit, c.RateBurst, d.now)
	d.breaker = newBreaker(c.BreakerFailures, c.BreakerOpenTimeout, d.now)
	d.metrics.SetMaxInFlight(c.MaxInFlight)
	d.metrics.SetRateLimit(d.pacer.limit())
	d.metrics.SetBreakerState(0)
	return d, nil
}

// Name is the destination's name.
func (d *Deliverer) Name() string { return d.cfg.Name }

// MaxInFlight is the most requests to the destination unanswered at once:
// a pipeline that pushes to it keeps no more batches in flight.
func (d *Deliverer) MaxInFlight() int { return d.cfg.MaxInFlight }

// errNotCounted marks a request error that says nothing about the third
// party's health (a 429, a refusal, our own cancellation): the breaker
// excludes it from its counts.
var errNotCounted = errors.New("delivery: not counted by the breaker")

// Deliver pushes a batch and returns what the third party made of it. An
// error that has a RetryAfter method (*WaitError) asks the caller to try
// again after that long, with no row at fault. Deliver is safe to call from
// many goroutines: their requests share the in-flight slots, the pacing,
// the pauses and the breaker.
func (d *Deliverer) Deliver(ctx context.Context, b Batch) (*Outcome, error) {
	out := &Outcome{}
	items, body := b.Items, b.Body
	if body == nil {
		if len(items) == 0 {
			return out, nil
		}
		body = thirdparty.AppendBatch(nil, items)
	} else if items == nil {
		var err error
		if items, err = thirdparty.DecodeBatch(body); err != nil {
			return nil, fmt.Errorf("delivery: recorded body: %w", err)
		}
		if len(items) == 0 {
			return out, nil
		}
	}
	j := &job{salt: b.Salt, batch: thirdparty.Batch{Source: cmp.Or(b.Source, SourceDefault), Time: b.Time}}
	if j.batch.Time.IsZero() {
		// Only a caller that records nothing comes here (the exporter
		// always passes the time it recorded): its bodies need not be
		// stable across processes.
		j.batch.Time = d.now().UTC().Truncate(time.Second)
	}
	var whole *thirdparty.Request
	if d.canonical != nil {
		r := d.canonical.CanonicalRequest(items, body)
		whole = &r
		j.wholeKey = cmp.Or(b.Key, thirdparty.BatchKey(d.cfg.Installation, b.Salt, body))
	}
	if err := d.deliver(ctx, j, items, whole, time.Time{}, true, out); err != nil {
		return nil, err
	}
	if err := d.judgeRejections(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// SourceDefault is the source a Batch without one belongs to: the
// resources export.
const SourceDefault = "resources"

// job is what the requests of one Deliver share.
type job struct {
	salt     string
	batch    thirdparty.Batch // Source and Time; Items set per call
	wholeKey string           // the key of the whole recorded body, for a canonical format
}

// key is the Idempotency-Key of one request: the recorded key for the
// recorded body, else a hash of the request's method, path and body, so a
// key still names one body, and requests without a body (a DELETE per
// item) still have keys of their own.
func (d *Deliverer) key(j *job, r *thirdparty.Request, whole bool) string {
	if whole {
		return j.wholeKey
	}
	if d.canonical != nil {
		return thirdparty.BatchKey(d.cfg.Installation, j.salt, r.Body)
	}
	return thirdparty.RequestKey(d.cfg.Installation, j.salt, cmp.Or(r.Method, "POST"), r.Path, r.Body)
}

// deliver sends items as the format's requests (concurrently when there
// are several: they share the in-flight slots) and splits a request
// refused as a whole. whole, when set, is the request of the recorded
// body. pendingSince is when items first came back pending (zero: they
// did not).
func (d *Deliverer) deliver(ctx context.Context, j *job, items []thirdparty.Item, whole *thirdparty.Request, pendingSince time.Time, admit bool, out *Outcome) error {
	var reqs []thirdparty.Request
	if whole != nil {
		reqs = []thirdparty.Request{*whole}
	} else {
		var err error
		if reqs, err = d.render(ctx, j, items); err != nil {
			if isProgramFailure(err) {
				return d.isolate(ctx, j, items, err, pendingSince, out)
			}
			return err
		}
	}
	if len(reqs) == 1 {
		return d.deliverRequest(ctx, j, &reqs[0], whole != nil, pendingSince, out)
	}
	// As many workers as requests may be in flight, taking the requests in
	// order; the slots bound what is in flight across batches. The items
	// of one batch have distinct ids, so their order is free.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outs := make([]Outcome, len(reqs))
	// first is the failure that stopped the others: theirs (a cancelled
	// request, or an answer read after the cancellation) follow from it.
	var mu sync.Mutex
	var first error
	var next atomic.Int64
	var wg sync.WaitGroup
	work := func() {
		// A context of the worker's own: each request's context is a child
		// of it, and children of one context shared by every worker would
		// take turns at its lock, twice a request.
		wctx, wcancel := context.WithCancel(cctx)
		defer wcancel()
		for {
			i := int(next.Add(1)) - 1
			if i >= len(reqs) || wctx.Err() != nil {
				return
			}
			if err := d.deliverRequest(wctx, j, &reqs[i], false, pendingSince, &outs[i]); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		}
	}
	workers := min(len(reqs), d.cfg.MaxInFlight)
	if d.refusing() {
		// A refused destination's next request is its probe, and the
		// others are turned away at once: were they sent alongside it,
		// the first turned away would cancel the probe, and the hold
		// would never end. One at a time, the probe goes first and the
		// rest follow only once it is accepted.
		workers = 1
	}
	var admitErr error
	if admit {
		admitErr = d.admit(cctx, workers, func() bool { return next.Load() >= int64(len(reqs)) }, &wg, work)
	} else {
		for range workers {
			wg.Go(work)
		}
	}
	wg.Wait()
	if first == nil && admitErr != nil {
		return admitErr
	}
	for i := range reqs {
		out.Accepted = append(out.Accepted, outs[i].Accepted...)
		out.Rejected = append(out.Rejected, outs[i].Rejected...)
		out.Requests += outs[i].Requests
	}
	return first
}

// admit starts up to n workers of one batch's requests, each holding one
// of the destination's MaxInFlight worker places while it runs, and stops
// early once done says every request is taken. One batch at a time is
// admitted, in the order batches come, and it keeps the places it gets
// until its requests run out: batches then end one after another, in the
// order they were read. Were places handed round-robin, every batch in
// flight would end at about the same time, and the pipeline would have
// nothing to send while they are all marked at once and the next batches
// are read.
//
// Requests of a split or sent again (deliver from a worker) are not
// admitted: their caller holds a place already, and waiting for another
// could wait for itself.
func (d *Deliverer) admit(ctx context.Context, n int, done func() bool, wg *sync.WaitGroup, work func()) error {
	select {
	case d.admission <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-d.admission }()
	for range n {
		if done() {
			return nil
		}
		select {
		case d.places <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if done() {
			<-d.places
			return nil
		}
		wg.Go(func() {
			defer func() { <-d.places }()
			work()
		})
	}
	return nil
}

// render makes the format's requests of items, retrying a program that
// fails at run time with backoff: such a failure is no answer, and says so
// in the log and in the last error.
func (d *Deliverer) render(ctx context.Context, j *job, items []thirdparty.Item) ([]thirdparty.Request, error) {
	b := j.batch
	b.Items = items
	bo := d.newBackoff()
	for {
		reqs, err := d.format.Requests(&b)
		if err == nil || isProgramFailure(err) {
			return reqs, err
		}
		d.programFailed(ctx, err)
		next := bo.NextBackOff()
		if next == backoff.Stop {
			return nil, &WaitError{Err: fmt.Errorf("%w: %w", ErrGaveUp, err), Wait: d.cfg.GaveUpSnooze}
		}
		if err := sleep(ctx, next); err != nil {
			return nil, err
		}
	}
}

func (d *Deliverer) newBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(d.cfg.BackoffInitial),
		backoff.WithMaxInterval(d.cfg.BackoffMax),
		backoff.WithMaxElapsedTime(d.cfg.MaxElapsed),
	)
}

// deliverRequest sends one request until it is answered, splits it on a
// whole-request refusal, and sends again, after a backoff, the items the
// answer left pending.
func (d *Deliverer) deliverRequest(ctx context.Context, j *job, r *thirdparty.Request, whole bool, pendingSince time.Time, out *Outcome) error {
	key := d.key(j, r, whole)
	res, err := d.push(ctx, key, r, out)
	if err == nil {
		pending := apply(res, r.Items, out)
		if len(pending) == 0 {
			return nil
		}
		return d.retryPending(ctx, j, pending, pendingSince, out)
	}
	var we *WaitError
	var tpErr *thirdparty.Error
	if errors.As(err, &we) || !errors.As(err, &tpErr) || !tpErr.BatchRefused() {
		return err
	}
	if len(r.Items) == 1 {
		out.Rejected = append(out.Rejected, Rejection{Item: r.Items[0], Error: refusalText(tpErr)})
		return nil
	}
	half := len(r.Items) / 2
	for _, part := range [][]thirdparty.Item{r.Items[:half], r.Items[half:]} {
		if err := d.deliver(ctx, j, part, nil, pendingSince, false, out); err != nil {
			return err
		}
	}
	return nil
}

// retryPending sends items an answer left pending again, in requests of
// their own, after a backoff that grows from when they first came back
// pending; past MaxElapsed it gives up like push does.
func (d *Deliverer) retryPending(ctx context.Context, j *job, pending []thirdparty.Item, since time.Time, out *Outcome) error {
	now := d.now()
	if since.IsZero() {
		since = now
	}
	elapsed := now.Sub(since)
	if elapsed >= d.cfg.MaxElapsed {
		return &WaitError{Err: fmt.Errorf("%w: %d items left pending by the third party", ErrGaveUp, len(pending)), Wait: d.cfg.GaveUpSnooze}
	}
	wait := min(max(d.cfg.BackoffInitial, elapsed), d.cfg.BackoffMax)
	d.logger.DebugContext(ctx, "delivery: items left pending by the third party; sending them again",
		slog.Int("items", len(pending)), slog.Duration("in", wait))
	if err := sleep(ctx, wait); err != nil {
		return err
	}
	return d.deliver(ctx, j, pending, nil, since, false, out)
}

// apply adds what res made of items to out, and returns the items it left
// pending.
func apply(res *thirdparty.Result, items []thirdparty.Item, out *Outcome) (pending []thirdparty.Item) {
	if res == nil || (len(res.Rejected) == 0 && len(res.Pending) == 0) {
		out.Accepted = append(out.Accepted, items...)
		return nil
	}
	rejected := make(map[string]string, len(res.Rejected))
	for _, r := range res.Rejected {
		rejected[r.ID] = r.Error
	}
	left := make(map[string]bool, len(res.Pending))
	for _, id := range res.Pending {
		left[id] = true
	}
	for _, it := range items {
		id := it.ID
		if msg, ok := rejected[id]; ok {
			out.Rejected = append(out.Rejected, Rejection{Item: it, Error: cmp.Or(msg, "rejected")})
		} else if left[id] {
			pending = append(pending, it)
		} else {
			out.Accepted = append(out.Accepted, it)
		}
	}
	return pending
}

// refusalText says why a single item was refused as a whole batch: the
// status and the third party's explanation.
func refusalText(e *thirdparty.Error) string {
	msg := e.Body
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(e.Body), &body) == nil && body.Error != "" {
		msg = thirdparty.SafeText(body.Error)
	}
	text := "refused as a whole: " + strconv.Itoa(e.StatusCode)
	if msg != "" {
		text += " " + msg
	}
	return thirdparty.SafeText(text)
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
		if ctx.Err() != nil || errors.As(err, &we) {
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
			return nil, d.refused(ctx, &d.creds, tpErr,
				"delivery: the third party refused the credentials; nothing is sent until a probe succeeds (check "+d.cfg.CredentialsSetting+")")
		case thirdparty.ClassConfig:
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
	if err := d.pacer.wait(ctx); err != nil {
		return nil, fmt.Errorf("delivery: rate limit: %w", err), false
	}
	// The limiter's wait may outlast a pause that began meanwhile.
	if d.pauseLeft() > 0 {
		return nil, nil, true
	}
	done, err := d.breaker.allow()
	if err != nil {
		return nil, err, errors.Is(err, errProbing)
	}
	sentAt := d.pacer.sent()
	out.Requests++
	d.metrics.RequestStarted()
	res, err = d.client.Send(ctx, key, r, func(a *thirdparty.Answer) (*thirdparty.Result, error) { return d.format.Read(r, a) })
	d.metrics.RequestEnded()
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
	return res, err, false
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
