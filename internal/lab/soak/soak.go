// Package soak is `syncer-lab soak`: a seeded chaos run of real processes.
// Two or three daemons (the last through a PgBouncer in transaction mode:
// the pooler leg), the project's fake third party and writers run
// against a PostgreSQL server of the soak's own while a schedule drawn
// from the seed kills, freezes and terminates daemons, cuts and restarts
// the database and makes the API fail in every way the contract names,
// overlapping; it answers some items transiently for minutes, makes a
// response program slow, reloads the daemons under load and breaks a
// request program for a while. Checks run all along and after everything
// drains (nothing broken, nothing stalled outside the faults that hold a
// source, the database's last word everywhere); every violation is
// reported with the seed and its time into the run, so the run replays
// with SOAK_SEED.
package soak

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/lab"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Defaults of Config.
const (
	DurationDefault = 10 * time.Minute
	DaemonsDefault  = 3
	RateDefault     = 60.0
	KeysDefault     = 2000
	// LeaseDefault is the export lock's lease of the daemons (internal/locks).
	LeaseDefault = 10 * time.Second
	// DrainTimeoutDefault bounds the wait for everything to arrive once the
	// faults and writes stop.
	DrainTimeoutDefault = 4 * time.Minute
)

// Config is one soak run.
type Config struct {
	// Binary is the syncer binary run as the daemons. Required.
	Binary string
	// Duration is how long faults and writes go on; the last fifth has no
	// new fault. Defaults to DurationDefault.
	Duration time.Duration
	// Seed draws the schedule and the writes. Required (the command draws
	// one when none is given, and prints it).
	Seed uint64
	// Daemons is how many `syncer run` processes share the work. Defaults
	// to DaemonsDefault.
	Daemons int
	// Rate is the writers' statements a second, all tables together.
	// Defaults to RateDefault.
	Rate float64
	// Keys is the key space of each source table. Defaults to KeysDefault.
	Keys int64
	// PGBin is the bin directory of the PostgreSQL server to run. Defaults
	// to the newest under /usr/lib/postgresql, or pg_config's.
	PGBin string
	// Dir keeps the run's files (the cluster, the daemons' logs); a
	// scratch directory, removed after a run without violations, when
	// empty.
	Dir string
	// Out receives the report; Progress a line per fault as it starts.
	Out, Progress io.Writer
	// Pooler is the pooler leg: PoolerDirect (the default), PoolerOnly or
	// PoolerOff.
	Pooler string
	// Logger logs the soak's own errors. Defaults to discarding them.
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	o := *c
	o.Duration = cmp.Or(o.Duration, DurationDefault)
	o.Daemons = cmp.Or(o.Daemons, DaemonsDefault)
	o.Rate = cmp.Or(o.Rate, RateDefault)
	o.Keys = cmp.Or(o.Keys, KeysDefault)
	o.Pooler = cmp.Or(o.Pooler, PoolerDefault)
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// ErrViolations is returned when a check failed: the report lists each.
var ErrViolations = errors.New("soak: violations found")

// Run runs one soak and writes its report. It returns ErrViolations when
// a check failed, and another error when the soak itself could not run.
func Run(ctx context.Context, cfg *Config) error {
	c := cfg.withDefaults()
	if c.Binary == "" {
		return errors.New("soak: Config.Binary is required")
	}
	switch c.Pooler {
	case PoolerOff, PoolerDirect, PoolerOnly:
	default:
		return fmt.Errorf("soak: Config.Pooler %q: want %s, %s or %s", c.Pooler, PoolerDirect, PoolerOnly, PoolerOff)
	}
	bin, err := clusterBinDir(c.PGBin)
	if err != nil {
		return err
	}
	dir := c.Dir
	keep := dir != ""
	if dir == "" {
		if dir, err = os.MkdirTemp("", "syncer-soak-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r := &run{cfg: c, dir: dir, start: time.Now(), rep: newReport(c), failedSeen: map[string]bool{}}
	defer r.cleanup()
	if err := r.setup(ctx, bin); err != nil {
		return err
	}
	// The schedule's clock starts once every daemon serves /healthz: a
	// daemon signalled before its handlers are installed dies of the
	// signal's default action (a reload's SIGHUP a few milliseconds
	// after its start, on a machine slow to set the cluster up).
	if err := r.waitLive(ctx, time.Minute); err != nil {
		return err
	}
	r.start = time.Now()
	r.exercise(ctx)
	r.finish(ctx)
	r.rep.Dir = dir
	r.rep.write(c.Out)
	if len(r.rep.Violations) > 0 {
		keep = true
		return ErrViolations
	}
	if !keep {
		r.removeDir = true
	}
	return nil
}

// run is the state of one soak.
type run struct {
	cfg       Config
	dir       string
	start     time.Time
	cl        *cluster
	pool      *pgxpool.Pool
	dbURL     string
	proxy     *proxy
	pooler    *pooler // nil with PoolerOff
	live, crm *api
	search    *api // elasticsearch: the per-item transient
	hub       *api // custom: the slow response program, the broken request program
	hooks     *api // standard-webhooks: the per-row 404s
	daemons   []*daemon
	rep       *report
	pgMu      sync.Mutex // one restart at a time
	removeDir bool

	cfgMu      sync.Mutex // the configuration file
	configPath string
	cfgState   configState
	slowLoads  int

	stallMu sync.Mutex
	holds   []hold

	failedSeen map[string]bool // sources with a failed key reported, by the watch and then finish

	revs revocations // the soak's revocations of tenants (tokens.go)
}

func (r *run) since() time.Duration { return time.Since(r.start).Round(100 * time.Millisecond) }

func (r *run) setup(ctx context.Context, bin string) error {
	cl, err := startCluster(ctx, bin, r.dir)
	if err != nil {
		return err
	}
	r.cl = cl
	r.dbURL = cl.url(cl.port, "postgres")
	// The soak's own sessions carry its name, so a fault that ends
	// syncer's sessions spares them.
	pool, err := pgxpool.New(ctx, r.dbURL+"&application_name=soak")
	if err != nil {
		return err
	}
	r.pool = pool
	if _, err := pool.Exec(ctx, schemaSQL+ticketsSQL); err != nil {
		return fmt.Errorf("soak: tables: %w", err)
	}
	if r.proxy, err = newProxy(fmt.Sprintf("127.0.0.1:%d", cl.port)); err != nil {
		return err
	}
	if r.cfg.Pooler != PoolerOff {
		if _, err := pool.Exec(ctx, pooledRoleSQL); err != nil {
			return fmt.Errorf("soak: the pooled daemon's role: %w", err)
		}
		if r.pooler, err = startPooler(ctx, r.dir, cl.port); err != nil {
			return err
		}
	}
	r.live, r.crm = newAPI(r.cfg.Seed, ""), newAPI(r.cfg.Seed+1, "")
	r.setupTenants()
	r.search = newAPI(r.cfg.Seed+2, fakethirdparty.FormatElasticsearch)
	r.hub = newAPI(r.cfg.Seed+3, fakethirdparty.FormatCustom)
	r.hooks = newAPI(r.cfg.Seed+4, fakethirdparty.FormatStandardWebhooks)
	if err := r.setupConfig(); err != nil {
		return err
	}
	configPath := r.configPath
	env := daemonEnv(r.dbURL, r.live.url(), configPath, "127.0.0.1:0")
	migrate := exec.CommandContext(ctx, r.cfg.Binary, "migrate")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		return fmt.Errorf("soak: syncer migrate: %w: %s", err, out)
	}
	for i := range r.cfg.Daemons {
		port, err := lab.FreePort()
		if err != nil {
			return err
		}
		db := r.dbURL
		if i == 0 {
			// The first daemon reaches the database through the proxy.
			db = cl.url(r.proxy.port(), "postgres")
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		env := daemonEnv(db, r.live.url(), configPath, addr)
		if r.pooler != nil && i == pooledDaemon(r.cfg.Daemons) {
			env = r.pooledEnv(addr)
		}
		d := newDaemon(i, r.cfg.Binary, r.dir, addr, env)
		if err := d.start(); err != nil {
			return err
		}
		r.daemons = append(r.daemons, d)
	}
	return nil
}

// exercise writes and injects the schedule's faults for the run's
// duration, watching all along.
func (r *run) exercise(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	faults := schedule(r.cfg.Seed, r.cfg.Duration, r.cfg.Daemons, LeaseDefault)
	if r.pooler != nil {
		faults = append(faults, poolerFaults(r.cfg.Seed, r.cfg.Duration-r.cfg.Duration/5)...)
		sort.SliceStable(faults, func(i, j int) bool { return faults[i].At < faults[j].At })
	}
	w := &writers{pool: r.pool, rate: r.cfg.Rate, seed: r.cfg.Seed, keys: r.cfg.Keys}
	var wg sync.WaitGroup
	wctx, wcancel := context.WithTimeout(ctx, r.cfg.Duration)
	defer wcancel()
	wg.Go(func() { w.run(wctx, 4) })
	wg.Go(func() { r.tenantWrites(wctx, r.cfg.Duration/2) })
	wg.Go(func() { r.tenantVerifies(wctx) })
	mctx, mcancel := context.WithCancel(ctx)
	var mwg sync.WaitGroup
	mwg.Go(func() { r.watch(mctx) })
	var fwg sync.WaitGroup
	for _, f := range faults {
		fwg.Go(func() {
			select {
			case <-time.After(time.Until(r.start.Add(f.At))):
			case <-wctx.Done():
				return
			}
			r.inject(ctx, f)
		})
	}
	fwg.Wait()
	wg.Wait()
	r.rep.Writes, r.rep.WritesFailed = w.ok.Load(), w.failed.Load()
	// Everything drains: no fault, no write.
	r.drain(ctx)
	mcancel()
	mwg.Wait()
}

// inject carries out one fault, and undoes it after its length.
func (r *run) inject(ctx context.Context, f fault) {
	r.rep.count(f.Kind)
	fmt.Fprintf(r.cfg.Progress, "soak: %7s %s", r.since(), f.Kind)
	if f.For > 0 {
		fmt.Fprintf(r.cfg.Progress, " for %s", f.For)
	}
	switch f.Kind {
	case daemonKill, daemonTerm, daemonStop:
		fmt.Fprintf(r.cfg.Progress, " (daemon %d)", f.Target)
	case itemTransient:
		fmt.Fprintf(r.cfg.Progress, " (%.0f%% of ids answered %d)", 100*f.Share, f.Status)
	}
	fmt.Fprintln(r.cfg.Progress)
	var err error
	switch f.Kind {
	case daemonKill:
		err = r.daemons[f.Target].kill(ctx, syscall.SIGKILL, f.For)
	case daemonTerm:
		err = r.daemons[f.Target].kill(ctx, syscall.SIGTERM, f.For)
	case daemonStop:
		d := r.daemons[f.Target]
		d.signal(syscall.SIGSTOP)
		sleep(ctx, f.For)
		d.signal(syscall.SIGCONT)
	case pgTerminate:
		_, err = r.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name NOT LIKE 'soak%'`)
	case pgRestart:
		r.pgMu.Lock()
		err = r.cl.restart(ctx)
		r.pgMu.Unlock()
	case proxyBlackholed:
		r.proxy.blackhole(f.For)
	case proxyResets:
		r.proxy.reset()
	case poolerRestart:
		err = r.pooler.restart(ctx, f.For)
	case poolerPause:
		err = r.pooler.Pause(ctx, "postgres", f.For)
	case apiOutage:
		r.rep.outage(r.since(), f.For)
		r.hold(hold{from: r.since(), to: r.since() + f.For})
		r.apiFault(ctx, f)
	case itemTransient, slowResponse, configReload, brokenProgram, connectionsLocked:
		err = r.injectHeld(ctx, f)
	default:
		if failing[f.Kind] {
			r.hold(hold{from: r.since(), to: r.since() + f.For})
		}
		r.apiFault(ctx, f)
	}
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.WarnContext(ctx, "soak: a fault could not be injected", slog.String("fault", f.Kind), slog.String("error", err.Error()))
	}
}

func (r *run) apiFault(ctx context.Context, f fault) {
	for _, a := range r.apis() {
		a.push(f.Kind, f.Share)
	}
	sleep(ctx, f.For)
	for _, a := range r.apis() {
		a.pop(f.Kind)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (r *run) cleanup() {
	for _, d := range r.daemons {
		d.terminate(30 * time.Second)
	}
	if r.proxy != nil {
		r.proxy.close()
	}
	if r.pooler != nil {
		r.pooler.Stop()
	}
	for _, a := range []*api{r.live, r.crm, r.search, r.hub, r.hooks} {
		if a != nil {
			a.close()
		}
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if r.cl != nil {
		r.cl.stop()
	}
	if r.removeDir {
		_ = os.RemoveAll(r.dir)
	}
}
