package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"log/slog"
	"net"
	"time"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Defaults for Config.
const (
	HTTPAddrDefault        = "127.0.0.1:8080"
	ShutdownTimeoutDefault = 30 * time.Second
	WorkersDefault         = 4
	// GaugeIntervalDefault is the gauges' tick: a scrape of /metrics
	// refreshes them itself (freshGauges), so the tick bounds how old the
	// values a slow scrape gets are and how late a source's capture
	// warning is logged; at 5 s its statements were a periodic cost of
	// every daemon (docs/benchmarks.md, "An idle daemon's share").
	GaugeIntervalDefault = 15 * time.Second
	// FetchPollInterval is River's fetch poll: how late a job that
	// snoozed, or one another daemon's relay inserted, starts (this
	// daemon's relay starts its own at once: fetchDriver).
	FetchPollInterval      = 200 * time.Millisecond
	RescueStuckJobsDefault = 2 * time.Minute
)

// HTTPAddrOff as Config.HTTPAddr serves no HTTP at all. It is a word rather
// than the empty string because an empty setting means "the default"
// everywhere else (a blank environment variable, a zero Config field).
const HTTPAddrOff = "off"

// Config configures the daemon. A nil *Config is a Config of defaults, which
// fails validation for want of ThirdParty.URL.
type Config struct {
	// Session is the config of the connections that hold session state:
	// the locks' holder and the relay's LISTEN (database.Pools.Session,
	// SYNCER_DIRECT_URL's when given). Defaults to the pool's.
	Session *pgx.ConnConfig
	// Stateless says the pool goes through a pooler in transaction mode
	// (database.Pools.Stateless): the locks' pipes send nothing ahead.
	// River polls whatever it says.
	Stateless bool
	// NoSession says no connection may hold session state
	// (database.Pools.NoSession: a transaction pooler, no
	// SYNCER_DIRECT_URL): the locks are leases alone and the relay polls
	// the outbox instead of listening.
	NoSession bool
	// ThirdParty configures the HTTP client. URL is required. Defaults to
	// thirdparty's defaults.
	ThirdParty thirdparty.Config
	// ThirdPartyTokenFile is the file ThirdParty.Token was read from
	// (SYNCER_THIRDPARTY_TOKEN_FILE), read again when it changes; "" for
	// none.
	ThirdPartyTokenFile string
	// Delivery configures rate limiting, retries and the breaker. Defaults
	// to delivery's defaults.
	Delivery delivery.Config
	// Format is the format of the resources export (docs/protocol.md section
	// 6; a configured destination's is in Sources): its name and its own
	// settings, as its package parsed them (the command line reads the
	// SYNCER_THIRDPARTY_* settings through the same parsing). Defaults to
	// the syncer format.
	Format formats.Spec
	// Exporter configures batches and lingering. Defaults to exporter's
	// defaults.
	Exporter exporter.Config
	// HTTPAddr is where /healthz, /readyz and /metrics are served, host:port
	// (":8080" listens on every interface, as a container needs; port 0
	// picks a free port). HTTPAddrOff serves nothing. Defaults to
	// HTTPAddrDefault.
	HTTPAddr string
	// Pprof also serves /debug/pprof/ on HTTPAddr, except
	// /debug/pprof/cmdline, which would show the command line and so any
	// secret passed as a flag. Defaults to false.
	Pprof bool
	// ShutdownTimeout bounds the wait for the batch in flight on shutdown.
	// Defaults to ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// Workers is the number of River workers for syncer's queue. Defaults
	// to WorkersDefault.
	Workers int
	// SendUnchanged sends a version even when its body is the one the
	// third party last accepted for its key, and keeps no digests of
	// accepted bodies: what keeping and comparing them costs the drain
	// (docs/benchmarks.md) is then not paid. Defaults to false: such a
	// version is settled as skipped without a request (issue 45).
	SendUnchanged bool
	// PollInterval bounds the delay of a lost notification. Defaults to
	// outbox.PollIntervalDefault, applied by the relay.
	PollInterval time.Duration
	// GaugeInterval is how often the database-wide gauges are refreshed.
	// Defaults to GaugeIntervalDefault.
	GaugeInterval time.Duration
	// TombstoneRetention is how long a delivered tombstone is kept before
	// it is purged. Defaults to resources.TombstoneRetentionDefault.
	TombstoneRetention time.Duration
	// History configures the pruning of the rows' stories
	// (internal/history). Defaults to history's defaults.
	History history.Config
	// Sources is the SYNCER_CONFIG file read (config.Load): its sources
	// are exported to its destinations, each destination with its own
	// client, limits and shared facts, besides resources to ThirdParty.
	// Every source must be installed (syncer migrate --config). Defaults
	// to nil: resources only.
	Sources *config.Config
	// VerifyEvery is how often the daemons verify resources against the
	// destination ThirdParty configures, in the background, as a file's
	// destination's verify_every (docs/protocol.md section 11). Defaults
	// to 0: only on request.
	VerifyEvery time.Duration
	// VerifyHeal heals what background verification of resources finds,
	// as verify_heal. Defaults to false.
	VerifyHeal bool
	// VerifyTick is how often the daemon looks for verify runs due (a
	// period's, or "Verify now"). Defaults to verify.TickDefault.
	VerifyTick time.Duration
	// TenantTidyEvery is how often the daemon deletes what syncer kept of
	// tenants that are gone (tidy.go). Defaults to TenantTidyEveryDefault.
	TenantTidyEvery time.Duration
	// TenantForgetAfter is how long a tenant with nothing pending, failed
	// or paused keeps its facts since the last was written. Defaults to
	// TenantForgetAfterDefault.
	TenantForgetAfter time.Duration
	// Console, when set, builds the web console served at /console on
	// HTTPAddr. Defaults to nil: /console answers 404.
	Console ConsoleFunc
	// Logger receives the daemon's logs. Defaults to discarding.
	Logger *slog.Logger
	// Ready, if set, is called with the bound HTTP address (empty when
	// HTTPAddr is HTTPAddrOff) once the daemon serves and its River client
	// runs, and again after each reload it applied (Supervise). Tests use
	// it. Defaults to nil.
	Ready func(addr string)

	// fetchPoll replaces FetchPollInterval in the tests that tell a job
	// started by River's poll from one started at once (SetFetchPoll).
	fetchPoll time.Duration
}

// withDefaults returns c with every default applied, in one place.
func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.HTTPAddr = cmp.Or(out.HTTPAddr, HTTPAddrDefault)
	out.ShutdownTimeout = cmp.Or(out.ShutdownTimeout, ShutdownTimeoutDefault)
	out.Workers = cmp.Or(out.Workers, WorkersDefault)
	out.GaugeInterval = cmp.Or(out.GaugeInterval, GaugeIntervalDefault)
	out.TenantTidyEvery = cmp.Or(out.TenantTidyEvery, TenantTidyEveryDefault)
	out.TenantForgetAfter = cmp.Or(out.TenantForgetAfter, TenantForgetAfterDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// validate names the first bad field of a Config with defaults applied.
// The nested configs are validated by their own packages' New.
func (c *Config) validate() error {
	switch {
	case c.ThirdParty.URL == "" && c.Sources == nil:
		return errors.New("daemon: config: ThirdParty.URL is required (or Sources)")
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("daemon: config: ShutdownTimeout must not be negative, got %s", c.ShutdownTimeout)
	case c.Workers < 0:
		return fmt.Errorf("daemon: config: Workers must not be negative, got %d", c.Workers)
	case c.PollInterval < 0:
		return fmt.Errorf("daemon: config: PollInterval must not be negative, got %s", c.PollInterval)
	case c.GaugeInterval < 0:
		return fmt.Errorf("daemon: config: GaugeInterval must not be negative, got %s", c.GaugeInterval)
	case c.TenantTidyEvery < 0 || c.TenantForgetAfter < 0:
		return errors.New("daemon: config: TenantTidyEvery and TenantForgetAfter must not be negative")
	case c.VerifyEvery < 0:
		return fmt.Errorf("daemon: config: VerifyEvery must not be negative, got %s", c.VerifyEvery)
	case c.VerifyHeal && c.VerifyEvery == 0:
		return errors.New("daemon: config: VerifyHeal needs VerifyEvery")
	}
	if c.HTTPAddr != HTTPAddrOff {
		if err := CheckHTTPAddr(c.HTTPAddr); err != nil {
			return fmt.Errorf("daemon: config: HTTPAddr: %w", err)
		}
	}
	return nil
}

// CheckHTTPAddr reports whether addr is a host:port the daemon can listen
// on (the host may be empty, the port must be a number).
func CheckHTTPAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port or %q, got %q", HTTPAddrOff, addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("bad port in %q", addr)
	}
	return nil
}
