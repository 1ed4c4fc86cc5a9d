package tenants

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// ErrUnconnected says the tenants query gave no row for the tenant: its
// rows wait, pending, until one appears.
var ErrUnconnected = errors.New("tenants: no connection row for the tenant")

// Defaults for Config.
const (
	// RefreshEveryDefault is how long a tenant's connection row is
	// trusted before it is read again (docs/protocol.md section 10: at
	// most every 30 s).
	RefreshEveryDefault = 30 * time.Second
	// UnconnectedEvery bounds how long the answer "no usable row" is
	// trusted: a tenant whose row appears sends within it and the
	// exporter's retry (exporter.TenantRetryDefault), well under 30 s.
	UnconnectedEvery = 10 * time.Second
	// IdleAfterDefault is how long an unused tenant is kept.
	IdleAfterDefault = 10 * time.Minute
	// RereadRateDefault is how many idle tenants' rows Reread reads a
	// second (with as many at once). Unpaced, 10,000 idle tenants were
	// 10,000 queries every 30 s, 5.5 times the CPU of a daemon with one
	// (the idle row of syncer-lab bench's tenants); paced, an idle
	// tenant's account change is seen within 45 s up to 1,500 tenants held,
	// and within a pass of them all (tenants / 50 s) beyond.
	RereadRateDefault = 50.0
)

// Binder is the optional capability of a format whose requests depend on
// the tenant (the custom format's {tenant} and $tenant): the tenant's
// deliverer sends through the format it returns.
type Binder interface {
	ForTenant(tenant string, columns map[string]any) delivery.Format
}

// Config configures a Registry: one destination's settings.
type Config struct {
	// Destination is the destination's name. Required.
	Destination string
	// Settings are its tenants block. Defaults to nil: every tenant is
	// sent to ThirdParty's URL with its credentials, each tenant with its
	// own state.
	Settings *Settings
	// Pool runs the query and on_refresh, and keeps each tenant's shared
	// facts (syncer_state). Required.
	Pool *pgxpool.Pool
	// ThirdParty is the destination's client settings: URL (which may
	// hold {tenant}, replaced by the tenant's value, escaped), the
	// credentials used when a row gives none (Token, Auth), Headers (a
	// row's own headers are added, and win), TLS, Timeout, IdleConns.
	// HTTPClient, when set, is shared by every tenant; otherwise one is
	// built for all of them. URL is required unless Settings is set.
	ThirdParty thirdparty.Config
	// Delivery is the destination's deliverer settings (limits, format,
	// installation...), each tenant's own copy; its Format is bound to
	// the tenant when it is a Binder. Metrics, the destination's series,
	// are given to every tenant's deliverer as Metrics.Shared(): tenants'
	// requests count in the destination's counters (no label per tenant),
	// and no tenant sets the gauges of the destination's own state.
	Delivery delivery.Config
	// TokenURL is the token endpoint of a row's refresh_token, or client
	// id and secret (auth.token_url); it may hold {tenant}. ClientID and
	// ClientSecret are the application's client, used for a refresh
	// token when the row gives none. Scopes are asked for; Params are
	// added to a client-credentials grant's form. Defaults to none: such a
	// row is an error.
	TokenURL               string
	ClientID, ClientSecret *credentials.Secret
	Scopes                 []string
	Params                 map[string]string
	// Wrap wraps each tenant's client (the daemon's lock check). Defaults
	// to nil: none.
	Wrap func(delivery.Client) delivery.Client
	// Replay queues in tx a replay of tenant's live rows of every source
	// that sends to the destination, as `syncer replay --source S
	// --tenant T` does, and returns the replays' ids: called when the
	// account the tenant's row sends it to (its url, its account column)
	// changed (contract section 10.1, "A new account gets everything").
	// Defaults to nil: nothing is replayed and no account is kept (a
	// registry of verify's, tenants.replay_on_change: false).
	Replay func(ctx context.Context, tx pgx.Tx, tenant string) ([]int64, error)
	// RefreshEvery is how long a connection row is trusted. Defaults to
	// RefreshEveryDefault.
	RefreshEvery time.Duration
	// IdleAfter is how long a tenant not asked for is kept. Defaults to
	// IdleAfterDefault.
	IdleAfter time.Duration
	// RereadRate is how many idle tenants' rows Reread reads a second.
	// Defaults to RereadRateDefault.
	RereadRate float64
	// Queries bounds the tenants queries running at once. The daemon gives
	// every destination's registry the same gate, so that they hold at
	// most QueryConnsDefault of its connections together. Defaults to a
	// gate of QueryConnsDefault slots of the registry's own.
	Queries *QueryGate
	// Logger defaults to Delivery.Logger, else discarding.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Reader says the registry serves a reader in a process of its own
	// (`syncer verify --tenant`): without Settings.OnRefresh it never
	// spends a tenant's refresh token, since an exporting daemon may hold
	// the token the endpoint rotated it to (docs/design.md, "A refresh
	// token spent once"). Defaults to false.
	Reader bool
}

// Registry is one destination's tenants: a deliverer per tenant, built on
// first use from the destination's configuration and the tenant's
// connection row, kept while used, forgotten when idle (no goroutine,
// timer or session per idle tenant). It is safe for concurrent use.
type Registry struct {
	cfg    Config
	http   *http.Client // shared by every tenant's requests and token requests
	logger *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry
	swept   time.Time

	// behind is the reads of connected tenants' rows running behind their
	// batches (refreshBehind); Close cancels and waits for them.
	behind     sync.WaitGroup
	stopBehind context.CancelFunc
	behindCtx  context.Context
	// later is the stores of rotated refresh tokens being retried; Close
	// gives them StoreGrace.
	later *laterStores
	// warnedAt is when a failing query was last logged at WARN (Unix
	// nanoseconds): once a minute, not once per tenant.
	warnedAt atomic.Int64

	// downMu guards downErr, probing and probeAt. downErr is why the
	// query could not run, until a read succeeds: meanwhile tenants
	// without a deliverer do not wait for it, and one read at a time (the
	// probe, started at probeAt, running while probing) tells when it
	// runs again.
	downMu  sync.Mutex
	downErr error
	probing bool
	probeAt time.Time

	// prepares is whether the pool's connections prepare statements
	// (pgx's statement cache): not through a transaction pooler.
	prepares bool
}

// entry is one tenant. Its mu orders the reads of its row; the
// registry's mu only guards the map.
type entry struct {
	tenant string
	usedAt atomic.Int64 // Unix nanoseconds of the last For
	// stale is set when the third party refused the tenant's credentials:
	// the row is read again at the next For.
	stale atomic.Bool

	mu     sync.Mutex
	readAt time.Time
	// reads counts the reads applied; reading is set while one runs
	// behind the tenant's batches; failedAt is when the query last could
	// not run for a tenant that went on with its row (QueryRetry).
	reads    int
	reading  bool
	failedAt time.Time
	conn     *connection // nil: unconnected (or never read)
	err      error       // the tenant's state error, when it has no deliverer
	d        *delivery.Deliverer
	grant    *refreshGrant // the deliverer's refresh grant, if it has one
	// tokens is what this process knows of the tenant's refresh tokens,
	// shared by every grant of the tenant (a rebuilt deliverer's, a
	// reader's).
	tokens *tokenMemory
	// recorded is the connection fact last written for the tenant
	// (record): "" when none yet by this process.
	recorded string
	// account is the account fingerprint this process last found
	// recorded for the tenant (noteAccount): "" when none yet.
	account string
}

// New returns the registry of cfg's destination; nothing is read before
// the first For.
func New(cfg Config) (*Registry, error) {
	switch {
	case cfg.Destination == "":
		return nil, errors.New("tenants: config: Destination is required")
	case cfg.Pool == nil:
		return nil, errors.New("tenants: config: Pool is required")
	case cfg.Settings == nil && cfg.ThirdParty.URL == "":
		return nil, errors.New("tenants: config: ThirdParty.URL is required without Settings")
	case cfg.Settings != nil && strings.TrimSpace(cfg.Settings.Query) == "":
		return nil, errors.New("tenants: config: Settings.Query is required")
	case cfg.RefreshEvery < 0 || cfg.IdleAfter < 0 || cfg.RereadRate < 0:
		return nil, errors.New("tenants: config: RefreshEvery, IdleAfter and RereadRate must not be negative")
	}
	cfg.RereadRate = cmp.Or(cfg.RereadRate, RereadRateDefault)
	cfg.RefreshEvery = cmp.Or(cfg.RefreshEvery, RefreshEveryDefault)
	cfg.IdleAfter = cmp.Or(cfg.IdleAfter, IdleAfterDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	logger := cmp.Or(cfg.Logger, cfg.Delivery.Logger)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.ThirdParty.HTTPClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		idle := cmp.Or(cfg.ThirdParty.IdleConns, cfg.Delivery.WithDefaults().MaxInFlight)
		// Tenants often share one host: its idle connections serve them all.
		t.MaxIdleConns, t.MaxIdleConnsPerHost = max(64, 4*idle), max(16, 4*idle)
		if cfg.ThirdParty.TLS != nil {
			t.TLSClientConfig = cfg.ThirdParty.TLS
		}
		hc = &http.Client{Transport: t}
	}
	if cfg.Queries == nil {
		cfg.Queries = NewQueryGate(QueryConnsDefault)
	}
	bctx, stop := context.WithCancel(context.Background())
	prepares := cfg.Pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	return &Registry{cfg: cfg, http: hc, logger: logger, entries: map[string]*entry{}, behindCtx: bctx, stopBehind: stop, later: newLaterStores(), prepares: prepares}, nil
}

// Close ends the reads running behind tenants' batches, waits up to
// StoreGrace for the stores of rotated refresh tokens being retried (a
// token this process alone holds is lost with it), and closes the idle
// connections of every tenant's requests.
func (r *Registry) Close() {
	r.stopBehind()
	r.behind.Wait()
	r.later.close(StoreGrace)
	r.http.CloseIdleConnections()
}

// For returns tenant's deliverer, building it on first use and again when
// its connection row changed. The error is the tenant's state (its rows
// wait, pending): ErrUnconnected without a row, or what is wrong with the
// row; it never holds a secret.
func (r *Registry) For(ctx context.Context, tenant string) (*delivery.Deliverer, error) {
	now := r.cfg.Now()
	e := r.entry(tenant, now)
	e.mu.Lock()
	defer e.mu.Unlock()
	if reason := Invalid(tenant); reason != "" {
		// Never sent anywhere, nor given to the query: a value that is
		// not a path segment of its own (".", "..", "") would reach
		// another tenant's URL, or none.
		if !errors.Is(e.err, ErrInvalid) {
			// Quoted: the value may hold a control character.
			e.err = fmt.Errorf("destination %s: tenant %q: %w: %s; its rows wait", r.cfg.Destination, tenant, ErrInvalid, reason)
			r.logger.WarnContext(ctx, "tenants: a tenant's value is never sent; its rows wait", slog.String("tenant", strconv.Quote(tenant)), slog.String("error", e.err.Error()))
			e.d, e.grant, e.conn = nil, nil, nil
			r.record(ctx, e)
		}
		return nil, e.err
	}
	if e.d != nil && r.cfg.Settings == nil {
		return e.d, nil
	}
	// A tenant without a deliverer (unconnected, an unusable row) is read
	// again sooner: its rows must go within 30 s of its row appearing,
	// and the exporter asks again only every few seconds.
	every := r.cfg.RefreshEvery
	if e.d != nil && r.cfg.Settings != nil && r.down(now) == nil {
		// Read right before its batches while the query runs, at most
		// once every ReadFresh: a revoked connection holds the next one.
		every = min(every, ReadFresh)
	}
	if e.d == nil || refused(e.d, now) {
		// So is a tenant whose credentials the third party refused: the
		// application's new token resumes it within UnconnectedEvery.
		every = min(every, UnconnectedEvery)
	}
	if !e.readAt.IsZero() && now.Sub(e.readAt) < every && !e.stale.Load() {
		return e.d, e.err
	}
	if e.d != nil && r.cfg.Settings != nil && !e.stale.Load() && !refused(e.d, now) {
		// Its credentials are held: its batches go on with them while its
		// row is read again behind them, and while the query cannot run
		// (a table locked by a migration, a slow query) they go on past
		// RefreshEvery rather than wait for it. While it runs, the batch
		// waits for the read up to ReadBeforeWait.
		if r.down(now) == nil && r.readBefore(ctx, e, now) {
			if e.d == nil {
				return nil, e.err
			}
			return e.d, nil
		}
		r.refreshBehind(e, now, nil)
		return e.d, nil
	}
	if down := r.down(now); down != nil {
		// The query could not run: the tenant's lane does not wait for
		// it again (tenants.timeout a tenant), the registry's probe reads
		// behind, and its rows wait until a read succeeds.
		r.refreshBehind(e, now, nil)
		if e.d != nil {
			return e.d, nil
		}
		if e.err == nil || !errors.Is(e.err, down) {
			// Its state says why its rows wait (written once, not per ask).
			e.err = fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, e.tenant, down)
			r.record(ctx, e)
		}
		return nil, e.err
	}
	if err := r.refresh(ctx, e, now); err != nil {
		if e.d != nil {
			// The database failed, not the tenant: it goes on with the
			// row it had, read again at its next batch.
			return e.d, nil
		}
		return nil, err
	}
	return e.d, e.err
}

// entry returns tenant's entry, making it, and now and then forgets the
// tenants not asked for within IdleAfter.
func (r *Registry) entry(tenant string, now time.Time) *entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.swept) >= r.cfg.IdleAfter/4 {
		r.swept = now
		cutoff := now.Add(-r.cfg.IdleAfter).UnixNano()
		for name, e := range r.entries {
			// A tenant whose newest refresh token only this process
			// holds is kept: forgetting it would cut the tenant off.
			if e.usedAt.Load() < cutoff && !e.tokens.held() {
				delete(r.entries, name)
			}
		}
	}
	e, ok := r.entries[tenant]
	if !ok {
		e = &entry{tenant: tenant, tokens: &tokenMemory{}}
		r.entries[tenant] = e
	}
	e.usedAt.Store(now.UnixNano())
	return e
}

// Len is how many tenants the registry holds: those asked for within
// IdleAfter, and those not yet swept.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}
