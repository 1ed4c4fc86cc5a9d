// Package cli is syncer's command line: one small type per command, each
// with its flags (every flag also an environment variable; a flag wins), a
// Validate that names the bad flag, and output to injected writers so tests
// can run a command and read what it printed.
//
// Exit status: 0 done; 2 a usage or configuration error, with one line naming
// the flag or variable; 1 any other failure, with one line saying what
// failed. No stack trace for an expected error.
//
// Defaults shown by --help come from the packages' exported constants
// (kong interpolates them, see vars), so a default exists once.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/term"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/presence"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
	"github.com/syncer-dev/syncer/migrations"
)

// Logging is the log settings every command line of the project takes
// (syncer's and the lab's, cmd/syncer-lab).
type Logging struct {
	LogFormat string `name:"log-format" env:"SYNCER_LOG_FORMAT" enum:"auto,text,json" default:"auto" help:"Log format: text on a terminal and JSON otherwise when auto. JSON writes durations in seconds."`
	LogLevel  string `name:"log-level" env:"SYNCER_LOG_LEVEL" enum:"debug,info,warn,error" default:"info" help:"Lowest level logged (debug shows one line per batch)."`
}

// CLI is the root of the command tree: the daemon and the operator's
// commands. The lab (bench, soak, the fake third party) is a command of
// its own, cmd/syncer-lab, so the daemon's binary does not carry it;
// fake-thirdparty here runs the lab's (lab.go).
type CLI struct {
	Logging `embed:""`

	Migrate        MigrateCmd     `cmd:"" help:"Bring the database to the current schema (River's and syncer's). Idempotent."`
	Run            RunCmd         `cmd:"" help:"Run the daemon: relay outbox events into River jobs and export, until SIGTERM or SIGINT."`
	Replay         ReplayCmd      `cmd:"" help:"Re-export a range of rows whatever their synced_at, list replays or cancel one. Running daemons do the work."`
	Status         StatusCmd      `cmd:"" help:"Show counts and health."`
	Config         ConfigCmd      `cmd:"" help:"Check the configuration file (SYNCER_CONFIG) against the database: config check."`
	RetryFailed    RetryFailedCmd `cmd:"" name:"retry-failed" help:"Make failed rows eligible for export again."`
	History        HistoryCmd     `cmd:"" help:"Print a key's story: every exported version, each request that carried it (time, destination, status, latency, reason) and how it was settled."`
	Verify         VerifyCmd      `cmd:"" help:"Read back what the third party holds for a source's keys, report what drifted (exit 3) and, with --heal, make it pending again."`
	Pause          PauseCmd       `cmd:"" help:"Pause a destination for every daemon: nothing is sent to it, pending rows are kept, until resume. Returns once every running daemon holds the pause."`
	Resume         ResumeCmd      `cmd:"" help:"Resume a paused destination."`
	Probe          ProbeCmd       `cmd:"" help:"Probe a destination held by a refusal of its credentials or URL now, not at the next probe interval."`
	Healthcheck    HealthcheckCmd `cmd:"" help:"Exit 0 when the daemon on SYNCER_HTTP_ADDR answers /healthz, 1 otherwise (for a container's HEALTHCHECK)."`
	Version        VersionCmd     `cmd:"" help:"Print the version, commit and Go version."`
	FakeThirdparty LabCmd         `cmd:"" name:"fake-thirdparty" passthrough:"all" help:"Serve a local stand-in for the third-party API, with fault knobs (runs syncer-lab fake-thirdparty; see syncer-lab fake-thirdparty --help)."`
}

// Env is what a command gets besides its flags.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	// Logger logs to Stderr in the chosen format.
	Logger *slog.Logger
	// IsTerminal reports whether Stdout is a terminal.
	IsTerminal bool
}

// usageError marks a configuration error: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usage error naming the flag and its variable.
func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

type exitPanic int

// vars are the defaults --help shows and kong applies, from the packages'
// constants. A flag that is a pointer (--batch-size, --max-in-flight) shows
// its default as its placeholder and leaves applying it to the owner's
// Config (settings.go, unset).
func vars() kong.Vars {
	return kong.Vars{
		"batch_size":           strconv.Itoa(feed.ItemsDefault),
		"flag_formats":         orList(formats.Names(true)),
		"batch_max_bytes":      strconv.Itoa(feed.BytesDefault),
		"rate_burst":           strconv.Itoa(delivery.RateBurstDefault),
		"breaker_failures":     strconv.Itoa(delivery.BreakerFailuresDefault),
		"breaker_open_timeout": durationText(delivery.BreakerOpenTimeoutDefault),
		"backoff_max_elapsed":  durationText(delivery.MaxElapsedDefault),
		"request_timeout":      durationText(thirdparty.TimeoutDefault),
		"shutdown_timeout":     durationText(daemon.ShutdownTimeoutDefault),
		"http_addr":            daemon.HTTPAddrDefault,
		"http_addr_off":        daemon.HTTPAddrOff,
		"workers":              strconv.Itoa(daemon.WorkersDefault),
		"max_in_flight":        strconv.Itoa(delivery.MaxInFlightDefault),
		"max_retry_after":      durationText(delivery.MaxRetryAfterDefault),
		"hot_poll":             durationText(exporter.HotPollDefault),
		"hot_poll_max":         durationText(exporter.HotPollMax),
		"replay_share":         strconv.FormatFloat(exporter.ReplayShareDefault, 'f', -1, 64),
		"max_item_bytes":       strconv.Itoa(feed.MaxItemBytesDefault),
		"tombstone_retention":  durationText(resources.TombstoneRetentionDefault),
		"history_retention":    durationText(history.RetentionDefault),
		"history_max_entries":  strconv.Itoa(history.MaxEntriesDefault),
		"healthcheck_timeout":  durationText(healthcheckTimeoutDefault),
		"replay_poll":          durationText(replayPollDefault),
		"probe_wait":           durationText(probeWaitDefault),
		"replay_stall":         durationText(replayStallDefault),
		"check_timeout":        durationText(checkTimeoutDefault),
		"lookup_size":          strconv.Itoa(verify.LookupSizeDefault),
		"presence_within":      durationText(presence.AwaitDefault),
	}
}

// durationText writes d as a user would: 1m, not 1m0s.
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Program names a command line of the project and its --help defaults.
type Program struct {
	Name        string
	Description string
	Vars        kong.Vars
}

// syncer is the daemon's command line.
var syncer = Program{
	Name:        "syncer",
	Description: "Exports the rows of PostgreSQL tables (the application's own, named by --config, and the resources table) to third-party HTTP APIs, exactly as often as it must.",
}

// Main runs the command line and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var root CLI
	p := syncer
	p.Vars = vars()
	return Execute(ctx, p, &root, &root.Logging, args, stdout, stderr)
}

// Execute parses args into root (a kong command tree holding logging),
// runs the command and returns the exit status, on the conventions of the
// package comment. The lab's command line runs through it too, so both
// binaries speak alike.
func Execute(ctx context.Context, p Program, root any, logging *Logging, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if c, ok := r.(exitPanic); ok {
				code = int(c)
				return
			}
			panic(r)
		}
	}()
	parser, err := NewParser(p, root, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return 1
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "%s: %s\n", p.Name, oneLine(ue.msg))
			return 2
		}
		fmt.Fprintf(stderr, "%s: %s\n", p.Name, oneLine(err.Error()))
		return 2
	}
	env := &Env{Stdout: stdout, Stderr: stderr, IsTerminal: isTerminal(stdout)}
	env.Logger = newLogger(stderr, logging.LogFormat, logging.LogLevel)
	command := kctx.Command()
	if err := run(ctx, kctx, env); err != nil {
		// A command that printed its outcome and has a status of its own
		// (verify's 3: drift found).
		var xs *exitStatus
		if errors.As(err, &xs) {
			return xs.code
		}
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "%s: %s\n", p.Name, oneLine(ue.msg))
			return 2
		}
		// A package's error that says it is the user's setting (a
		// malformed DATABASE_URL found by database.Open) exits 2 as well.
		var usage interface{ IsUsage() bool }
		if errors.As(err, &usage) && usage.IsUsage() {
			fmt.Fprintf(stderr, "%s: %s\n", p.Name, oneLine(err.Error()))
			return 2
		}
		fmt.Fprintf(stderr, "%s: %s: %s\n", p.Name, command, oneLine(err.Error()))
		return 1
	}
	return 0
}

// run runs kctx's command. `syncer run` is called directly, not through
// kctx: a daemon runs for months, and kctx holds the parser's model of
// the whole command line (every command's flags, tags and help: 0.28 MB
// of the daemon's 2 MB live heap, which the collector doubles into its
// peak RSS; issue 55). RunCmd has no hooks and its parents no Run, so
// kong would call exactly this.
func run(ctx context.Context, kctx *kong.Context, env *Env) error {
	if node := kctx.Selected(); node != nil && node.Target.CanAddr() {
		if rc, ok := node.Target.Addr().Interface().(*RunCmd); ok {
			return rc.Run(ctx, env)
		}
	}
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(env)
	return kctx.Run()
}

// NewParser builds p's parser on root.
func NewParser(p Program, root any, stdout, stderr io.Writer) (*kong.Kong, error) {
	return kong.New(root,
		kong.Name(p.Name),
		kong.Description(p.Description),
		kong.Writers(stdout, stderr),
		kong.Exit(func(c int) { panic(exitPanic(c)) }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		p.Vars,
	)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "text" || (format == "auto" && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	opts.ReplaceAttr = secondsForDurations
	return slog.New(slog.NewJSONHandler(w, opts))
}

// secondsForDurations writes durations as seconds, a number, in JSON logs:
// slog's default is nanoseconds, which no log pipeline expects.
func secondsForDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}

// DB holds the database setting shared by commands that need one.
type DB struct {
	DatabaseURL     string `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL, e.g. postgres://user@host:5432/db. It holds a password: set it in the environment or with --database-url-file, not with this flag (flags show in ps). Never logged with its password."`
	DatabaseURLFile string `name:"database-url-file" env:"DATABASE_URL_FILE" placeholder:"FILE" help:"Read DATABASE_URL from FILE (a mounted secret), once at start; a trailing newline is ignored."`
	DirectURL       string `name:"direct-url" env:"SYNCER_DIRECT_URL" help:"PostgreSQL URL of the one connection that may hold session state (the locks, LISTEN): direct or session-pooled, when DATABASE_URL goes through a pooler in transaction mode (PgBouncer pool_mode=transaction, Supavisor, RDS Proxy). Optional: without it the locks are leases alone and new rows are found by polling. It holds a password: set it in the environment."`
	Schema          string `name:"schema" env:"SYNCER_SCHEMA" placeholder:"NAME" help:"Keep syncer's and River's tables (resources included) in schema NAME, created by migrate, out of the application's way; the application's tables stay where they are. Default: the first schema of the search_path (public)."`

	// fromFile is set once the file was read: kong may validate twice.
	fromFile bool
	// session and stateless are what open found (database.Pools), for
	// the daemon.
	session   *pgx.ConnConfig
	stateless bool
	noSession bool
}

// Validate reads the file setting, if any, and checks that the URL parses:
// a malformed URL is a configuration error (exit 2), found before any
// connection is tried. Only pgx's reason is repeated, never the URL.
func (d *DB) Validate() error {
	if d.DatabaseURLFile != "" && !d.fromFile {
		if d.DatabaseURL != "" {
			return usagef("--database-url (DATABASE_URL) and --database-url-file (DATABASE_URL_FILE) are exclusive: set one")
		}
		v, err := readSecretFile(d.DatabaseURLFile)
		if err != nil {
			return usagef("--database-url-file (DATABASE_URL_FILE): %v", err)
		}
		d.DatabaseURL, d.fromFile = v, true
	}
	if d.DatabaseURL == "" {
		return usagef("--database-url (DATABASE_URL) is required")
	}
	if _, err := database.ParseURL(d.DatabaseURL); err != nil {
		return usagef("--database-url (DATABASE_URL) is malformed: %s", parseReason(err))
	}
	if d.DirectURL != "" {
		if _, err := database.ParseURL(d.DirectURL); err != nil {
			return usagef("--direct-url (SYNCER_DIRECT_URL) is malformed: %s", parseReason(err))
		}
	}
	if d.Schema != "" && (len(d.Schema) > 63 || strings.ContainsRune(d.Schema, 0)) {
		return usagef("--schema (SYNCER_SCHEMA) must be a PostgreSQL name: 1 to 63 bytes, no NUL")
	}
	return nil
}

// parseReason is what pgx says is wrong with a connection string, without
// the string: pgx writes "cannot parse `<string>`: <reason>", with the
// password masked, but a reason alone is all the user needs.
func parseReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		return msg[i+3:]
	}
	return "want postgres://user@host:5432/database or key=value settings"
}

// readSecretFile reads a secret mounted as a file, as the configuration's
// *_file fields are read (config.ReadSecretFile): one trailing newline is
// not part of the secret; the error names the file, never its content.
func readSecretFile(path string) (string, error) {
	v, msg := config.ReadSecretFile(path)
	if msg != "" {
		return "", errors.New(msg)
	}
	return v, nil
}

// open opens the pool; app names the command in pg_stat_activity.
func (d *DB) open(ctx context.Context, app string) (*pgxpool.Pool, error) {
	p, err := database.OpenPools(ctx, d.DatabaseURL, d.DirectURL, app, d.Schema)
	if err != nil {
		return nil, err
	}
	d.session, d.stateless, d.noSession = p.Session, p.Stateless, p.NoSession
	return p.Pool, nil
}

// openDirect opens a pool on SYNCER_DIRECT_URL when it is given, else on
// DATABASE_URL: for migrate, whose lock is a session's.
func (d *DB) openDirect(ctx context.Context, app string) (*pgxpool.Pool, error) {
	if d.DirectURL == "" {
		return d.open(ctx, app)
	}
	pool, err := database.OpenIn(ctx, d.DirectURL, app, d.Schema)
	if pe := (*database.PoolerError)(nil); errors.As(err, &pe) {
		pe.Name = "SYNCER_DIRECT_URL"
	}
	return pool, err
}

// openMigrated opens the pool and fails with one line telling to run
// `syncer migrate` when the schema is missing or older than this binary.
func (d *DB) openMigrated(ctx context.Context, app string) (*pgxpool.Pool, error) {
	pool, err := d.open(ctx, app)
	if err != nil {
		return nil, err
	}
	if err := d.checkSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	if err := checkMigrated(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// checkSchema makes sure that the schema --schema names exists: a search
// path naming a missing schema silently falls through to the next one,
// where an older installation may live.
func (d *DB) checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if d.Schema == "" {
		return nil
	}
	current, err := database.CurrentSchema(ctx, pool)
	if err != nil && !errors.Is(err, database.ErrNotMigrated) {
		return err
	}
	if current != d.Schema {
		return fmt.Errorf("schema %s does not exist: %w", d.Schema, database.ErrNotMigrated)
	}
	return nil
}

func checkMigrated(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := migrations.All()
	if err != nil {
		return err
	}
	return database.CheckMigrated(ctx, pool, all[len(all)-1].Version)
}
