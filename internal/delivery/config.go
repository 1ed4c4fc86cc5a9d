package delivery

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/metrics"
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

// WithDefaults returns c with every unset field at its documented default:
// the one place delivery's defaults are applied. New applies it; a caller
// that sizes something to the deliverer (the daemon keeps MaxInFlight idle
// connections to the destination) reads the effective values from it.
func (c *Config) WithDefaults() Config {
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
