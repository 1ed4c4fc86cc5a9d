package cli

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// RunCmd is `syncer run`.
type RunCmd struct {
	DB
	ConfigFile
	ConsoleFlags
	ThirdpartyURL               string        `name:"thirdparty-url" env:"SYNCER_THIRDPARTY_URL" help:"Base URL of the third-party API (batches go to URL/v1/batches)."`
	ThirdpartyToken             string        `name:"thirdparty-token" env:"SYNCER_THIRDPARTY_TOKEN" help:"Bearer token sent to the third party, if set. Set it in the environment or with --thirdparty-token-file, not with this flag (flags show in ps). Never logged."`
	ThirdpartyTokenFile         string        `name:"thirdparty-token-file" env:"SYNCER_THIRDPARTY_TOKEN_FILE" placeholder:"FILE" help:"Read the bearer token from FILE (a mounted secret), again whenever FILE changes and on SIGHUP; a trailing newline is ignored. Exclusive with --thirdparty-token."`
	ThirdpartyFormat            string        `name:"thirdparty-format" env:"SYNCER_THIRDPARTY_FORMAT" default:"syncer" help:"Format of the resources export's requests: ${flag_formats} (docs/destinations.md)."`
	ThirdpartySigningSecret     string        `name:"thirdparty-signing-secret" env:"SYNCER_THIRDPARTY_SIGNING_SECRET" help:"Signing secret of the standard-webhooks format (whsec_ and base64). Set it in the environment or with --thirdparty-signing-secret-file, not with this flag. Never logged."`
	ThirdpartySigningSecretFile string        `name:"thirdparty-signing-secret-file" env:"SYNCER_THIRDPARTY_SIGNING_SECRET_FILE" placeholder:"FILE" help:"Read the signing secret from FILE (a mounted secret), again whenever FILE changes and on SIGHUP, as a destination's signing_secret_file. Exclusive with --thirdparty-signing-secret."`
	BatchSize                   *int          `name:"batch-size" env:"SYNCER_BATCH_SIZE" placeholder:"${batch_size}" help:"Items a batch."`
	BatchMaxBytes               int           `name:"batch-max-bytes" env:"SYNCER_BATCH_MAX_BYTES" default:"${batch_max_bytes}" help:"Payload bytes a batch, at most."`
	RateLimit                   float64       `name:"rate-limit" env:"SYNCER_RATE_LIMIT" default:"0" help:"Requests a second to the third party; 0 means no limit."`
	RateBurst                   int           `name:"rate-burst" env:"SYNCER_RATE_BURST" default:"${rate_burst}" help:"Burst of the rate limit."`
	BreakerFailures             int           `name:"breaker-failures" env:"SYNCER_BREAKER_FAILURES" default:"${breaker_failures}" help:"Consecutive transient failures that open the circuit breaker."`
	BreakerOpenTimeout          time.Duration `name:"breaker-open-timeout" env:"SYNCER_BREAKER_OPEN_TIMEOUT" default:"${breaker_open_timeout}" help:"How long the circuit breaker stays open before a probe."`
	BackoffMaxElapsed           time.Duration `name:"backoff-max-elapsed" env:"SYNCER_BACKOFF_MAX_ELAPSED" default:"${backoff_max_elapsed}" help:"How long one batch is retried after transient failures before the job pauses."`
	RequestTimeout              time.Duration `name:"request-timeout" env:"SYNCER_REQUEST_TIMEOUT" default:"${request_timeout}" help:"Timeout of one request to the third party."`
	ShutdownTimeout             time.Duration `name:"shutdown-timeout" env:"SYNCER_SHUTDOWN_TIMEOUT" default:"${shutdown_timeout}" help:"How long the batch in flight may take to finish on SIGTERM."`
	HTTPAddr                    string        `name:"http-addr" env:"SYNCER_HTTP_ADDR" default:"${http_addr}" help:"Address of /healthz, /readyz and /metrics (host:port; :8080 listens on every interface, as a container needs); ${http_addr_off} serves nothing."`
	Workers                     int           `name:"workers" env:"SYNCER_WORKERS" default:"${workers}" help:"River workers for syncer's queue."`
	Pprof                       bool          `name:"pprof" env:"SYNCER_PPROF" help:"Serve /debug/pprof/ on the HTTP address (never /debug/pprof/cmdline, which would show the flags)."`

	MaxInFlight        *int          `name:"max-in-flight" env:"SYNCER_MAX_IN_FLIGHT" placeholder:"${max_in_flight}" help:"Requests to the third party unanswered at once, at most."`
	MaxRetryAfter      time.Duration `name:"max-retry-after" env:"SYNCER_MAX_RETRY_AFTER" default:"${max_retry_after}" help:"Longest wait a Retry-After or a quota reset may impose; a longer one is cut to it, and logged."`
	ReplayShare        float64       `name:"replay-share" env:"SYNCER_REPLAY_SHARE" default:"${replay_share}" help:"Least share of the batches a replay gets while live rows keep arriving (above 0, at most 1)."`
	MaxItemBytes       int           `name:"max-item-bytes" env:"SYNCER_MAX_ITEM_BYTES" default:"${max_item_bytes}" help:"A row whose payload is larger is never sent: it is recorded failed, with the reason."`
	TombstoneRetention time.Duration `name:"tombstone-retention" env:"SYNCER_TOMBSTONE_RETENTION" default:"${tombstone_retention}" help:"How long a delivered tombstone is kept, so a replay of its range sends the delete again."`
	HistoryRetention   time.Duration `name:"history-retention" env:"SYNCER_HISTORY_RETENTION" default:"${history_retention}" help:"How long each exported version's story (syncer history) is kept."`
	HistoryMaxEntries  int64         `name:"history-max-entries" env:"SYNCER_HISTORY_MAX_ENTRIES" default:"${history_max_entries}" help:"Most entries of the rows' stories kept (about 200 bytes each); past it the oldest go first, whatever their age."`
	NoHistory          bool          `name:"no-history" env:"SYNCER_NO_HISTORY" help:"Keep no story of the rows (syncer history finds nothing new); what is kept is still pruned."`
	SendUnchanged      bool          `name:"send-unchanged" env:"SYNCER_SEND_UNCHANGED" help:"Send a row's version even when its body is the one the third party last accepted (by default it is settled as skipped, without a request); no digests of accepted bodies are kept."`
	VerifyEvery        time.Duration `name:"verify-every" env:"SYNCER_VERIFY_EVERY" default:"0" help:"How often the daemons verify resources against SYNCER_THIRDPARTY_URL in the background (a file's destination sets verify_every); 0 means only syncer verify and the console's Verify now."`
	VerifyHeal         bool          `name:"verify-heal" env:"SYNCER_VERIFY_HEAL" help:"Heal what background verification of resources finds (needs --verify-every)."`
	HotPoll            time.Duration `name:"hot-poll" env:"SYNCER_HOT_POLL" default:"${hot_poll}" help:"How often a job looks for new rows while writes flow, from one look to the next (at most ${hot_poll_max}). Shorter lowers latency and costs more CPU a row; longer makes batches of more rows."`

	// tokenFromFile is set once the token file was read: kong may
	// validate twice.
	tokenFromFile bool
	// secretFromFile is tokenFromFile for the signing secret.
	secretFromFile bool
	// format is the resources export's format, as Validate read it.
	format formats.Spec
}

// validateFormat reads the resources export's format from its settings
// through the format's own parsing, as a destination of the file is read
// (flagFields are its fields): an unknown format, a missing secret or one
// of the wrong form exits 2, naming the setting, never quoting the
// secret.
func (c *RunCmd) validateFormat() error {
	if c.ThirdpartySigningSecretFile != "" && !c.secretFromFile {
		if c.ThirdpartySigningSecret != "" {
			return usagef("%s and %s are exclusive: set one", setting(c, "ThirdpartySigningSecret"), setting(c, "ThirdpartySigningSecretFile"))
		}
		secret, err := readSecretFile(c.ThirdpartySigningSecretFile)
		if err != nil {
			return usagef("%s: %v", setting(c, "ThirdpartySigningSecretFile"), err)
		}
		c.ThirdpartySigningSecret, c.secretFromFile = secret, true
	}
	reg := formats.Default()
	k, ok := reg.Lookup(c.ThirdpartyFormat)
	if !ok || !k.Flags {
		return usagef("%s must be one of %s (custom needs a file: SYNCER_CONFIG), got %q", setting(c, "ThirdpartyFormat"),
			strings.Join(reg.Names(true), ", "), c.ThirdpartyFormat)
	}
	settings, err := k.Parse(&flagFields{c: c})
	if err != nil {
		return err
	}
	c.format = formats.Spec{Name: k.Name, Settings: settings}
	return nil
}

// orList is names as a sentence says them: "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// flagFields are the SYNCER_THIRDPARTY_* settings as a format reads its
// fields (setting.Fields): a signing secret, nothing else.
type flagFields struct{ c *RunCmd }

var _ formats.Fields = (*flagFields)(nil)

func (f *flagFields) String(string) (string, error)   { return "", nil }
func (f *flagFields) Bool(string) (bool, bool, error) { return false, false, nil }
func (f *flagFields) Mapping(string, []string) (formats.Fields, error) {
	return nil, nil
}

func (f *flagFields) Secret(field string) (formats.Secret, error) {
	c := f.c
	if field != "signing_secret" || c.ThirdpartySigningSecret == "" {
		return formats.Secret{Field: field}, nil
	}
	if c.secretFromFile {
		return formats.Secret{Field: field, File: c.ThirdpartySigningSecretFile, Value: c.ThirdpartySigningSecret}, nil
	}
	return formats.Secret{Field: field, Env: "SYNCER_THIRDPARTY_SIGNING_SECRET", Value: c.ThirdpartySigningSecret}, nil
}

// Errorf names the setting the field stands for, in the command line's
// words as they always were ("required by standard-webhooks").
func (f *flagFields) Errorf(field, msg string) error {
	name := "ThirdpartyFormat"
	if strings.HasPrefix(field, "signing_secret") {
		name = "ThirdpartySigningSecret"
		if f.c.secretFromFile {
			name = "ThirdpartySigningSecretFile"
		}
	}
	return usagef("%s: %s", setting(f.c, name), strings.Replace(msg, "required by format ", "required by ", 1))
}

// Validate names the first bad setting.
func (c *RunCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if c.VerifyEvery != 0 && c.VerifyEvery < config.MinVerifyEvery {
		return usagef("%s must be 0 or at least %s, got %s", setting(c, "VerifyEvery"), config.MinVerifyEvery, c.VerifyEvery)
	}
	if c.VerifyHeal && c.VerifyEvery == 0 {
		return usagef("%s needs %s", setting(c, "VerifyHeal"), setting(c, "VerifyEvery"))
	}
	if c.ThirdpartyTokenFile != "" && !c.tokenFromFile {
		if c.ThirdpartyToken != "" {
			return usagef("%s and %s are exclusive: set one", setting(c, "ThirdpartyToken"), setting(c, "ThirdpartyTokenFile"))
		}
		token, err := readSecretFile(c.ThirdpartyTokenFile)
		if err != nil {
			return usagef("%s: %v", setting(c, "ThirdpartyTokenFile"), err)
		}
		c.ThirdpartyToken, c.tokenFromFile = token, true
	}
	switch {
	case c.ThirdpartyURL == "" && c.Config == "":
		return usagef("%s is required (or %s)", setting(c, "ThirdpartyURL"), setting(c, "Config"))
	case c.ThirdpartyURL == "":
		// A configuration alone: its sources go to its destinations, and
		// resources are not exported.
	case !validHTTPURL(c.ThirdpartyURL):
		return usagef("%s must be an http or https URL", setting(c, "ThirdpartyURL"))
	}
	if err := c.validateFormat(); err != nil {
		return err
	}
	if err := c.validateConsole(); err != nil {
		return err
	}
	if err := positive(c, "BatchSize", "BatchMaxBytes", "RateBurst", "BreakerFailures", "BreakerOpenTimeout",
		"BackoffMaxElapsed", "RequestTimeout", "ShutdownTimeout", "Workers"); err != nil {
		return err
	}
	if err := positive(c, "MaxInFlight", "MaxRetryAfter", "MaxItemBytes", "TombstoneRetention", "HistoryRetention", "HistoryMaxEntries"); err != nil {
		return err
	}
	if err := notNegative(c, "RateLimit"); err != nil {
		return err
	}
	if !(c.HotPoll > 0 && c.HotPoll <= exporter.HotPollMax) {
		return usagef("%s must be above 0 and at most %s, got %s", setting(c, "HotPoll"), durationText(exporter.HotPollMax), durationText(c.HotPoll))
	}
	if !(c.ReplayShare > 0 && c.ReplayShare <= 1) {
		return usagef("%s must be above 0 and at most 1, got %v", setting(c, "ReplayShare"), c.ReplayShare)
	}
	if c.HTTPAddr != daemon.HTTPAddrOff {
		if err := daemon.CheckHTTPAddr(c.HTTPAddr); err != nil {
			return usagef("%s: %v", setting(c, "HTTPAddr"), err)
		}
	}
	return nil
}

func validHTTPURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Run runs the daemon until SIGTERM or SIGINT.
func (c *RunCmd) Run(ctx context.Context, env *Env) error {
	setHeapSampling(c.Pprof)
	gcPct, gcSource := setGCPercent()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGHUP reads every secret and certificate file again (a rotated
	// Kubernetes Secret is seen within a second anyway), and the
	// configuration file (read every 10 s anyway).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// A file that does not parse is a usage error before any connection;
	// once running, a bad edit is logged and the previous one runs on.
	if _, err := c.ConfigFile.Load(true); err != nil {
		return err
	}
	pool, err := c.openWaiting(ctx, "syncer run", env.Logger, startWaitDefault)
	if pool == nil {
		return err // nil when stopped while waiting for the database
	}
	defer pool.Close()
	setMemoryLimit(env.Logger)
	env.Logger.Info("run: collector target", slog.String("source", gcSource), slog.Int("gc_percent", gcPct))
	adaptProcs(ctx, env.Logger, os.LookupEnv)
	// The startup pages go once the daemon is ready, before its first
	// drain has its heap at full size (releaseStartupPages), and the
	// pages of code run since every releasePagesEvery.
	var released sync.Once
	ready := func(string) {
		released.Do(func() {
			releaseStartupPages(ctx, env.Logger)
			go releasePages(ctx, env.Logger, releasePagesEvery)
		})
	}
	reload := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-hup:
				select {
				case reload <- struct{}{}:
				default:
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return daemon.Supervise(ctx, pool, &daemon.SuperviseConfig{
		Path: c.Config,
		Load: func(string) (*config.Config, error) { return c.ConfigFile.Load(true) },
		Daemon: func(srcs *config.Config) (*daemon.Config, error) {
			dc := c.daemonConfig(pool, srcs, env)
			dc.Ready = ready
			return dc, nil
		},
		Reload: reload,
		Logger: env.Logger,
	})
}

// daemonConfig is the daemon's configuration: the flags, and srcs, the
// configuration file as read.
func (c *RunCmd) daemonConfig(pool *pgxpool.Pool, srcs *config.Config, env *Env) *daemon.Config {
	return &daemon.Config{
		Session:             c.session,
		Stateless:           c.stateless,
		NoSession:           c.noSession,
		ThirdParty:          thirdparty.Config{URL: c.ThirdpartyURL, Token: c.ThirdpartyToken, Timeout: c.RequestTimeout},
		ThirdPartyTokenFile: c.ThirdpartyTokenFile,
		Format:              c.format,
		Delivery: delivery.Config{
			RateLimit:          c.RateLimit,
			RateBurst:          c.RateBurst,
			BreakerFailures:    c.BreakerFailures,
			BreakerOpenTimeout: c.BreakerOpenTimeout,
			MaxElapsed:         c.BackoffMaxElapsed,
			MaxInFlight:        unset(c.MaxInFlight),
			MaxRetryAfter:      c.MaxRetryAfter,
		},
		Exporter: exporter.Config{
			BatchSize:     unset(c.BatchSize),
			BatchMaxBytes: c.BatchMaxBytes,
			MaxItemBytes:  c.MaxItemBytes,
			ReplayShare:   c.ReplayShare,
			HotPoll:       c.HotPoll,
			NoHistory:     c.NoHistory,
		},
		Sources:            srcs,
		TombstoneRetention: c.TombstoneRetention,
		History:            history.Config{Retention: c.HistoryRetention, MaxEntries: c.HistoryMaxEntries},
		HTTPAddr:           c.HTTPAddr,
		Pprof:              c.Pprof,
		ShutdownTimeout:    c.ShutdownTimeout,
		Workers:            c.Workers,
		SendUnchanged:      c.SendUnchanged,
		VerifyEvery:        c.VerifyEvery,
		VerifyHeal:         c.VerifyHeal,
		Logger:             env.Logger,
		Console:            c.consoleFunc(pool, srcs, env.Logger),
	}
}
