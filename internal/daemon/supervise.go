package daemon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/sources"
)

// ReloadIntervalDefault is how often a daemon reads its configuration file
// and the installed sources again (SuperviseConfig.Interval).
const ReloadIntervalDefault = 10 * time.Second

// SuperviseConfig says how Supervise builds a daemon from a configuration
// file and when it builds it again.
type SuperviseConfig struct {
	// Path is the configuration file (SYNCER_CONFIG). Empty: the daemon
	// runs as Daemon builds it, and is never rebuilt.
	Path string
	// Load reads the file at Path. Its first error is Supervise's; a later
	// one is logged while the running configuration goes on.
	Load func(path string) (*config.Config, error)
	// Daemon returns the daemon's configuration for the file's contents
	// (nil without Path).
	Daemon func(src *config.Config) (*Config, error)
	// Interval is how often the file and the installed sources are read
	// again. Defaults to ReloadIntervalDefault.
	Interval time.Duration
	// Reload asks, when it receives (SIGHUP), for every secret and the
	// configuration to be read again now.
	Reload <-chan struct{}
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// StartWait is how long the first daemon's build is tried again while
	// the database drops its connections (a restart under way, a pooler
	// that lost its server). Defaults to StartWaitDefault.
	StartWait time.Duration
}

// StartWaitDefault is SuperviseConfig.StartWait's default: as long as
// `syncer run` waits for a database that does not answer yet.
const StartWaitDefault = time.Minute

// Supervise runs a daemon on pool until ctx is cancelled, and applies to
// it, in place, what changed of what it runs: the configuration file's
// contents, or what `syncer migrate` recorded of the sources the file
// names (a source installed, changed or removed while the daemons run).
// The new configuration is built first (its file parses, every
// destination builds, every source it names is installed as named); only
// then is it swapped in (reload.go): the sources and destinations it left
// as they were keep exporting, those it changed are stopped within a few
// seconds, or abandoned and said, and start again with it. One that does
// not build is logged, once, and syncer_config_last_reload_successful says
// 0, while the previous configuration keeps running: an edit half saved,
// or a file naming a source migrate has not installed yet, never stops the
// export.
//
// A source that migrate installed and the file does not name is not
// exported by this daemon: it says so in its log and in
// syncer_source_unconfigured, so that a daemon left with an older file is
// found.
func Supervise(ctx context.Context, pool *pgxpool.Pool, sc *SuperviseConfig) error {
	s := &supervisor{cfg: *sc, pool: pool}
	s.cfg.Interval = cmp.Or(s.cfg.Interval, ReloadIntervalDefault)
	s.logger = cmp.Or(s.cfg.Logger, slog.Default())
	if s.cfg.Load == nil {
		s.cfg.Load = func(path string) (*config.Config, error) { return config.Load(path, os.Getenv) }
	}
	s.cfg.StartWait = cmp.Or(s.cfg.StartWait, StartWaitDefault)
	d, err := s.firstWaiting(ctx)
	if d == nil {
		return err // nil when stopped while waiting for the database
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return s.watch(ctx, d, done)
}

// supervisor is Supervise's state: what the running daemon was built from.
type supervisor struct {
	cfg    SuperviseConfig
	pool   *pgxpool.Pool
	logger *slog.Logger

	running string // the identity of what the running daemon runs
	failed  string // the identity last tried and refused: not tried again

	// The file as last read: its digest and what it parsed to (nil when
	// it did not parse).
	fileDigest string
	file       *config.Config
	fileErr    error

	unconfigured []string // installed sources the file does not name, as last logged
}

// firstWaiting builds the first daemon, trying again for up to StartWait,
// with backoff, while the database drops the connections the build reads
// on: the server answered when the pool opened, so a reset, a session
// ended by a restart or a refused connection now is the restart under
// way (a daemon started again by its supervisor while PostgreSQL
// restarts), not a wrong address; any other refusal ends the start at
// once. The build starts nothing (New), so a try that failed leaves
// nothing behind. A stop asked for while it waits returns nil, nil.
func (s *supervisor) firstWaiting(ctx context.Context) (*Daemon, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, s.cfg.StartWait
	var d *Daemon
	err := backoff.RetryNotify(func() error {
		var err error
		d, err = s.first(ctx)
		if err != nil && (ctx.Err() != nil || !(database.NotYet(err) || errors.Is(err, syscall.ECONNREFUSED))) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx), func(err error, wait time.Duration) {
		s.logger.WarnContext(ctx, "run: the database dropped the connection while the daemon started; trying again",
			slog.Duration("in", wait), slog.String("error", err.Error()))
	})
	if ctx.Err() != nil {
		if d != nil {
			d.closeClients()
		}
		return nil, nil
	}
	return d, err
}

func (s *supervisor) first(ctx context.Context) (*Daemon, error) {
	var src *config.Config
	var defs map[string]string
	if s.cfg.Path != "" {
		var err error
		if src, err = s.read(); err != nil {
			return nil, err
		}
		if defs, err = sources.Definitions(ctx, s.pool); err != nil {
			return nil, err
		}
		s.running = identity(s.fileDigest, src, defs)
	}
	dc, err := s.cfg.Daemon(src)
	if err != nil {
		return nil, err
	}
	d, err := New(ctx, s.pool, dc)
	if err != nil {
		return nil, err
	}
	d.metrics.Config.LastReloadTime.SetToCurrentTime()
	if src != nil {
		s.noteUnconfigured(ctx, d, src, defs)
	}
	return d, nil
}

// read reads the file, parsing it again only when its bytes changed.
func (s *supervisor) read() (*config.Config, error) {
	raw, err := os.ReadFile(s.cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("daemon: configuration file: %w", err)
	}
	sum := sha256.Sum256(raw)
	digest := hex.EncodeToString(sum[:])
	if digest != s.fileDigest {
		s.fileDigest = digest
		s.file, s.fileErr = s.cfg.Load(s.cfg.Path)
	}
	return s.file, s.fileErr
}

// identity names what a daemon built from src runs: the file's bytes, and
// for each source the file names, its definition as installed (or its
// absence). Sources the file does not name take no part: a daemon does not
// run them whatever migrate does to them.
func identity(fileDigest string, src *config.Config, defs map[string]string) string {
	var b strings.Builder
	b.WriteString(fileDigest)
	if src != nil {
		for _, c := range src.Sources {
			fmt.Fprintf(&b, "\n%s=%s", c.Name, cmp.Or(defs[c.Name], "absent"))
		}
	}
	return b.String()
}

// watch applies to the running daemon d what changed of its
// configuration until it ends, and returns its error.
func (s *supervisor) watch(ctx context.Context, d *Daemon, done <-chan error) error {
	if s.cfg.Path == "" {
		return <-done
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-s.cfg.Reload:
			d.Reload()
			s.failed = "" // asked for: try again, and say again why not
		case <-t.C:
		}
		if ctx.Err() != nil {
			return <-done
		}
		s.check(ctx, d)
	}
}

// check reads the file and the installed sources, and applies them to d
// when they name something d does not run.
func (s *supervisor) check(ctx context.Context, d *Daemon) {
	log := s.logger.With(slog.String("config", s.cfg.Path))
	defs, err := sources.Definitions(ctx, s.pool)
	if err != nil {
		if ctx.Err() == nil {
			log.DebugContext(ctx, "daemon: could not read the installed sources; trying again later", slog.String("error", err.Error()))
		}
		return
	}
	src, err := s.read()
	if err != nil {
		if id := "file " + s.fileDigest; s.failed != id {
			s.failed = id
			d.metrics.Config.LastReloadSuccessful.Set(0)
			log.ErrorContext(ctx, "daemon: the configuration file changed and cannot be read; the previous configuration keeps running", slog.String("error", err.Error()))
		}
		return
	}
	s.noteUnconfigured(ctx, d, src, defs)
	id := identity(s.fileDigest, src, defs)
	if id == s.running || id == s.failed {
		return
	}
	dc, err := s.cfg.Daemon(src)
	if err == nil {
		err = d.reconfigure(ctx, dc)
	}
	if err != nil {
		s.failed = id
		d.metrics.Config.LastReloadSuccessful.Set(0)
		log.ErrorContext(ctx, "daemon: the configuration changed and cannot run; the previous configuration keeps running (run syncer migrate --config with this file, or fix it)",
			slog.String("error", err.Error()))
		return
	}
	s.running, s.failed = id, ""
}

// noteUnconfigured logs, when they change, the installed sources that the
// file does not name, and keeps syncer_source_unconfigured in step.
func (s *supervisor) noteUnconfigured(ctx context.Context, d *Daemon, src *config.Config, defs map[string]string) {
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		if src.Source(name) == nil {
			missing = append(missing, name)
		}
	}
	d.metrics.Config.SourceUnconfigured.Reset()
	for _, name := range missing {
		d.metrics.Config.SourceUnconfigured.WithLabelValues(name).Set(1)
	}
	if slices.Equal(missing, s.unconfigured) {
		return
	}
	s.unconfigured = missing
	if len(missing) > 0 {
		s.logger.WarnContext(ctx, "daemon: syncer migrate installed sources that this daemon's configuration file does not name: this daemon does not export them (give it the file migrate was given; it is read again every "+s.cfg.Interval.String()+" and on SIGHUP)",
			slog.String("config", s.cfg.Path), slog.String("sources", strings.Join(missing, ",")))
	}
}

// sourceNames are the configured sources the daemon runs.
func (d *Daemon) sourceNames() []string {
	if d.cfg.Sources == nil {
		return nil
	}
	out := make([]string, 0, len(d.cfg.Sources.Sources))
	for _, c := range d.cfg.Sources.Sources {
		out = append(out, c.Name)
	}
	return out
}
