package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	SetProbeAnswer(ctx context.Context, a breakerstore.ProbeAnswer) error
}

var (
	_ Store = (*breakerstore.Shared)(nil)
	_ Store = (*breakerstore.Store)(nil)
)

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
	// probeFor is the time of a person's probe the next request answers,
	// in Unix nanoseconds; 0 when none waits (probe.go).
	probeFor atomic.Int64
	// holdMu orders adoptions of a hold; holdGen is the generation of the
	// one held (AdoptHold).
	holdMu  sync.Mutex
	holdGen int64
	// urlGood is set by a 2xx answer and unset by a configuration
	// refusal; absentStreak counts per-item 404s and 410s since an answer
	// last accepted an item (deferred.go).
	urlGood      atomic.Bool
	absentStreak atomic.Int32

	mu    sync.Mutex
	pause pause
	creds refusal
	conf  refusal
	// streak is the batches rejected whole for one reason in a row
	// (storm.go).
	streak streak
	// programs is what is known of the format's request program
	// (isolate.go).
	programs programs
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
	// storedByEndpoint says the refusal the store held when last read,
	// while this process knew none of its own (refusalUnknown), is the
	// token endpoint's: a grant ends it (granted).
	storedByEndpoint bool
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
	c := cfg.WithDefaults()
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

// Deliver pushes a batch and returns what the third party made of it, as
// soon as every request of it is answered: accepted, rejected and deferred
// items together. An error that has a RetryAfter method (*WaitError) asks
// the caller to try again after that long, with no row at fault: it is
// kept for what holds the whole destination (a pause, the breaker, a
// refusal, whole requests failing past MaxElapsed). Deliver is safe to call from
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
	if d.canonical == nil {
		if err := d.programHeld(ctx); err != nil {
			return nil, err
		}
	}
	if err := d.deliver(ctx, j, items, whole, time.Time{}, true, out); err != nil {
		if we, ok := err.(*WaitError); ok && len(out.Attempts) > 0 {
			// The requests made before the wait are part of the
			// rows' story: a copy carries them (the error may be
			// shared).
			return nil, &WaitError{Err: we.Err, Wait: we.Wait, Attempts: out.Attempts}
		}
		return nil, err
	}
	if d.canonical == nil {
		d.programs.rendered(out.Accepted)
	}
	if err := d.judgeAbsent(ctx, out); err != nil {
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
