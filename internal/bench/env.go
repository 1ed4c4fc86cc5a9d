package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/fakethirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

// runner holds what the scenarios share.
type runner struct {
	cfg    Config
	sizes  Sizes
	report *Report

	// syncerDrainRate is the drain's rows/s, reused by the recipe's
	// comparison when the drain ran in the same invocation.
	syncerDrainRate float64
	// jobLockWaitRow is the index of job economy's lock-wait row, whose
	// baseline the recipe fills in; 0 when it did not run.
	jobLockWaitRow int
	// noCheckpoint notes once that the role may not checkpoint.
	noCheckpoint sync.Once
}

func (r *runner) progressf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func (r *runner) note(format string, args ...any) {
	r.report.Notes = append(r.report.Notes, fmt.Sprintf(format, args...))
}

// schemaURL returns the database URL with search_path set to schema and
// sessions tagged with its name (empty: the URL as given).
func (r *runner) schemaURL(schema string) (string, error) {
	u, err := url.Parse(r.cfg.DatabaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("bench: the database URL must be a postgres:// URL")
	}
	if schema == "" {
		return u.String(), nil
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (r *runner) connect(ctx context.Context, schema string) (*pgx.Conn, error) {
	dsn, err := r.schemaURL(schema)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	return conn, nil
}

func (r *runner) pool(ctx context.Context, schema string, maxConns int32) (*pgxpool.Pool, error) {
	dsn, err := r.schemaURL(schema)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: pool config: %w", err)
	}
	pc.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("bench: pool: %w", err)
	}
	return p, nil
}

// scratch is one migrated scratch schema with a pool on it.
type scratch struct {
	name string
	dsn  string
	pool *pgxpool.Pool
	r    *runner

	dropped bool
}

// newScratch creates and migrates a schema named after the scenario. When
// plain is set, syncer's triggers are disabled: the table is the same, with
// the same indexes, and writers pay for nothing of syncer's.
func (r *runner) newScratch(ctx context.Context, label string, plain bool) (*scratch, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "bench_" + strings.ReplaceAll(label, "-", "_") + "_" + hex.EncodeToString(b[:])
	conn, err := r.connect(ctx, "")
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("bench: create schema: %w", err)
	}
	s := &scratch{name: name, r: r}
	if s.dsn, err = r.schemaURL(name); err != nil {
		s.drop(ctx)
		return nil, err
	}
	if s.pool, err = r.pool(ctx, name, int32(r.sizes.Writers+4)); err != nil {
		s.drop(ctx)
		return nil, err
	}
	if _, err := migrations.Up(ctx, s.pool, nil); err != nil {
		s.drop(ctx)
		return nil, fmt.Errorf("bench: migrate %s: %w", name, err)
	}
	if plain {
		if _, err := s.pool.Exec(ctx, "ALTER TABLE resources DISABLE TRIGGER USER"); err != nil {
			s.drop(ctx)
			return nil, fmt.Errorf("bench: disable triggers: %w", err)
		}
	}
	return s, nil
}

// drop ends the schema's sessions and drops it, even after cancellation.
func (s *scratch) drop(ctx context.Context) {
	if s.dropped {
		return
	}
	s.dropped = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if s.pool != nil {
		s.pool.Close()
	}
	conn, err := s.r.connect(ctx, "")
	if err != nil {
		s.r.cfg.Logger.WarnContext(ctx, "bench: cannot drop scratch schema", "schema", s.name, "error", err.Error())
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND application_name = $1`, s.name)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.name}.Sanitize()+" CASCADE"); err != nil {
		s.r.cfg.Logger.WarnContext(ctx, "bench: cannot drop scratch schema", "schema", s.name, "error", err.Error())
	}
}

// payloadSQL builds a ~300-byte JSON object for row i; payloadFor is the
// same in Go, for writers that insert one row at a time.
const payloadSQL = `jsonb_build_object('id', i, 'name', 'resource-' || i, 'kind', 'bench', 'data', repeat(md5(i::text), 7))`

var filler = strings.Repeat("0123456789abcdef", 14) // 224 bytes, as repeat(md5, 7)

func payloadFor(i int64) []byte {
	return fmt.Appendf(nil, `{"id": %d, "name": "resource-%d", "kind": "bench", "data": "%s"}`, i, i, filler)
}

// preload inserts n rows in one statement, then vacuums and analyzes the
// table and checkpoints, so every scenario (and its baseline) starts from
// the same state.
func (s *scratch) preload(ctx context.Context, n int) error {
	if err := s.exec(ctx, "preload", `INSERT INTO resources (payload) SELECT `+payloadSQL+` FROM generate_series(1, $1) i`, n); err != nil {
		return err
	}
	return s.settle(ctx, "resources")
}

// settle vacuums and analyzes tables, then checkpoints: what a preload
// wrote is on disk before the phase measured next. Without the checkpoint,
// one the preload's WAL set off ran during one side's measurement and not
// the other's, and its writes, with the full-page images that every first
// change of a page logs after it, moved one drain of 100,000 tombstones
// from 105,000 to 190,000 a second from run to run. A role not allowed to
// checkpoint only loses that: the bench says so in its notes.
func (s *scratch) settle(ctx context.Context, tables ...string) error {
	for _, t := range tables {
		if err := s.exec(ctx, "vacuum", `VACUUM (ANALYZE) `+pgx.Identifier{t}.Sanitize()); err != nil {
			return err
		}
	}
	_, err := s.pool.Exec(ctx, `CHECKPOINT`)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		s.r.noCheckpoint.Do(func() {
			s.r.note("the role may not CHECKPOINT (PostgreSQL 15 grants it to pg_checkpoint): the server's own checkpoints fall on the measured phases at random, and figures vary more")
		})
		return nil
	}
	if err != nil {
		return fmt.Errorf("bench: checkpoint: %w", err)
	}
	return nil
}

func (s *scratch) exec(ctx context.Context, what, sql string, args ...any) error {
	if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("bench: %s: %w", what, err)
	}
	return nil
}

func (s *scratch) anyPending(ctx context.Context) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resources WHERE synced_at IS NULL AND failed_at IS NULL)`).Scan(&ok)
	return ok, err
}

// waitDrained waits until the fake accepted want items and no row is
// pending, and returns when the table was first seen drained.
func (s *scratch) waitDrained(ctx context.Context, fake *fakethirdparty.Server, want int64, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if fake.Stats().ItemsAccepted >= want {
			pending, err := s.anyPending(ctx)
			if err != nil {
				return time.Time{}, fmt.Errorf("bench: wait for drain: %w", err)
			}
			if !pending {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("bench: not drained after %s: the fake accepted %d of %d items", limit, fake.Stats().ItemsAccepted, want)
		case <-t.C:
		}
	}
}

// fake is the third party, served by this process on a loopback port.
type fake struct {
	*fakethirdparty.Server
	url string
	srv *http.Server
}

// startFake starts a well-behaved fake third party sized for items items
// (fakethirdparty.Config.ExpectedItems): it shares the machine with the
// daemon it measures, and regrowing its records as a drain goes on took
// CPU from the drain.
func startFake(items int) (*fake, error) {
	return startFakeWith(fakethirdparty.Config{ExpectedItems: items})
}

// startFakeWith starts a fake third party with the knobs of cfg.
func startFakeWith(cfg fakethirdparty.Config) (*fake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen for the fake third party: %w", err)
	}
	f := &fake{Server: fakethirdparty.New(cfg)}
	f.srv = &http.Server{Handler: f.Server, ReadHeaderTimeout: 5 * time.Second}
	f.url = "http://" + ln.Addr().String()
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *fake) close() {
	f.Server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
}

// daemon is a `syncer run` subprocess.
type daemon struct {
	cmd     *exec.Cmd
	addr    string
	stderr  *tailBuffer
	done    chan struct{}
	waitErr error
	started time.Time
}

// freeAddr returns a loopback address nobody listens on right now. The
// daemon is told its address so the bench can reach /readyz and pprof
// without parsing logs.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// startDaemon starts the daemon on s and waits until it is ready. started
// is taken just before the process starts.
// settings change the daemon's defaults: a "--flag" (with its value as the
// next setting) follows the default flags, so it wins; a "NAME=value"
// changes the daemon's environment (see mergeEnv).
func (r *runner) startDaemon(ctx context.Context, s *scratch, f *fake, pprof bool, settings ...string) (*daemon, error) {
	var extra, env []string
	for i := 0; i < len(settings); i++ {
		if strings.HasPrefix(settings[i], "--") {
			extra = append(extra, settings[i])
			if i+1 < len(settings) && !strings.Contains(settings[i], "=") {
				i++
				extra = append(extra, settings[i])
			}
			continue
		}
		env = append(env, settings[i])
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("bench: find a port for the daemon: %w", err)
	}
	args := []string{"run",
		"--database-url", s.dsn,
		"--thirdparty-url", f.url,
		"--http-addr", addr,
		"--batch-size", strconv.Itoa(r.sizes.BatchSize),
		"--rate-limit", "0",
		"--shutdown-timeout", "10s",
		"--log-level", "warn",
		"--log-format", "text",
	}
	if pprof {
		args = append(args, "--pprof")
	}
	args = append(args, extra...)
	d := &daemon{addr: addr, stderr: &tailBuffer{max: 16 << 10}, done: make(chan struct{})}
	d.cmd = exec.Command(r.cfg.Binary, args...)
	d.cmd.Stdout = d.stderr
	d.cmd.Stderr = d.stderr
	if len(env) > 0 {
		d.cmd.Env = mergeEnv(os.Environ(), env)
	}
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the daemon %s: %w", r.cfg.Binary, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if err := d.waitReady(ctx, 30*time.Second); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

func (d *daemon) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/readyz", nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("bench: the daemon exited before it was ready (%v): %s", d.waitErr, d.stderr.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the daemon was not ready after %s: %s", limit, d.stderr.String())
		}
	}
}

// peakRSS returns the process's peak resident set (VmHWM) in bytes.
func (d *daemon) peakRSS() (int64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("bench: read the daemon's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: parse VmHWM %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("bench: no VmHWM in /proc/<pid>/status")
}

// cpuSeconds returns the user and system CPU time the process used so far.
func (d *daemon) cpuSeconds() (float64, error) {
	return procCPUSeconds(strconv.Itoa(d.cmd.Process.Pid))
}

// procCPUSeconds returns the user and system CPU time process pid ("self"
// for this one) used so far.
func procCPUSeconds(pid string) (float64, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, fmt.Errorf("bench: read a process's cpu time: %w", err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th of them, in clock ticks (100 a second on
	// Linux).
	_, rest, ok := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, errors.New("bench: unexpected /proc/<pid>/stat")
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil
}

// postgresCPUSeconds returns the CPU time used so far by the PostgreSQL
// processes of this machine that are still running (0 when the database
// is elsewhere). Sampled around a run, it is what the server spent on it:
// the bench's own sessions are idle meanwhile, and a backend that exits
// in between is missed.
func postgresCPUSeconds() float64 {
	ents, _ := os.ReadDir("/proc")
	var sum float64
	for _, e := range ents {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || !strings.HasPrefix(string(comm), "postgres") {
			continue
		}
		if s, err := procCPUSeconds(e.Name()); err == nil {
			sum += s
		}
	}
	return sum
}

// metric returns the sum of a metric's samples (over its labels, if any)
// from the daemon's /metrics.
func (d *daemon) metric(ctx context.Context, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench: metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue
		}
		if i := strings.LastIndexByte(rest, ' '); i >= 0 {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest[i+1:]), 64)
			if err != nil {
				return 0, fmt.Errorf("bench: metrics: %s: %w", name, err)
			}
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("bench: metrics: no %s", name)
	}
	return sum, nil
}

// stop sends SIGTERM and waits; a daemon that does not stop in time is
// killed. It returns an error when the daemon did not exit 0.
func (d *daemon) stop() error {
	select {
	case <-d.done:
	default:
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
			return fmt.Errorf("bench: the daemon did not stop within 30s of SIGTERM: %s", d.stderr.String())
		}
	}
	if d.waitErr != nil {
		return fmt.Errorf("bench: the daemon exited with %v: %s", d.waitErr, d.stderr.String())
	}
	return nil
}

// profile saves a CPU profile of the daemon over seconds to path.
func (d *daemon) profile(ctx context.Context, seconds int, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", d.addr, seconds), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: cpu profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: cpu profile: status %d", resp.StatusCode)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return fmt.Errorf("bench: cpu profile: %w", err)
	}
	return out.Close()
}

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(t.buf.String())
	if s == "" {
		return "(no output)"
	}
	return s
}

// writeResult is what a set of writers did.
type writeResult struct {
	rows    int64
	took    time.Duration
	commits []time.Time // by id - firstID, when wanted
	ids     []int64
	rtt     []time.Duration
}

func (w writeResult) rate() float64 { return float64(w.rows) / max(w.took.Seconds(), 1e-9) }

// insertFunc inserts one row in its own transaction and returns its id.
type insertFunc func(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error)

func plainInsert(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error) {
	var id int64
	err := conn.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ($1) RETURNING id`, payloadFor(i)).Scan(&id)
	return id, err
}

// write runs writers concurrent writers, each on its own connection, each
// inserting single-row transactions with insert. It stops after n rows in
// all (n > 0) or after d (n == 0). When track is set it records, per row,
// the id and the time its commit returned.
func write(ctx context.Context, pool *pgxpool.Pool, writers int, n int64, d time.Duration, insert insertFunc, track bool) (writeResult, error) {
	var next, done atomic.Int64
	var mu sync.Mutex
	var res writeResult
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stop atomic.Bool
	if n == 0 {
		time.AfterFunc(d, func() { stop.Store(true) })
	}
	errc := make(chan error, writers)
	start := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				errc <- err
				return
			}
			defer conn.Release()
			var ids []int64
			var at []time.Time
			var rtt []time.Duration
			for !stop.Load() {
				i := next.Add(1)
				if n > 0 && i > n {
					break
				}
				t0 := time.Now()
				id, err := insert(ctx, conn, i)
				if err != nil {
					errc <- err
					cancel()
					return
				}
				done.Add(1)
				if track {
					now := time.Now()
					ids, at, rtt = append(ids, id), append(at, now), append(rtt, now.Sub(t0))
				}
			}
			mu.Lock()
			res.ids = append(res.ids, ids...)
			res.commits = append(res.commits, at...)
			res.rtt = append(res.rtt, rtt...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return res, fmt.Errorf("bench: writer: %w", err)
	}
	res.rows = done.Load()
	return res, nil
}

// paced inserts total rows with insert, one a tick of interval, from
// writers connections, recording for each row its id and when its commit
// returned. The connections are open before the first tick: opening
// dozens of them (TLS handshakes on both ends) is not part of the rate.
func paced(ctx context.Context, pool *pgxpool.Pool, writers, total int, interval time.Duration, insert insertFunc) (writeResult, error) {
	conns := make([]*pgxpool.Conn, 0, writers)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range writers {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return writeResult{}, fmt.Errorf("bench: writer: %w", err)
		}
		conns = append(conns, conn)
	}
	ticks := make(chan int64, total)
	go func() {
		defer close(ticks)
		// Each row has its time from the start, not from the row before:
		// a ticker drops ticks at short intervals (4,000 a second), and a
		// late row is followed by the next ones at once, so the offered
		// rate holds.
		t0 := time.Now()
		for i := range total {
			if wait := time.Until(t0.Add(time.Duration(i) * interval)); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			ticks <- int64(i + 1)
		}
	}()
	var mu sync.Mutex
	var res writeResult
	errc := make(chan error, writers)
	start := time.Now()
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() {
			for i := range ticks {
				t0 := time.Now()
				id, err := insert(ctx, conn, i)
				if err != nil {
					errc <- err
					return
				}
				now := time.Now()
				mu.Lock()
				res.ids, res.commits, res.rtt = append(res.ids, id), append(res.commits, now), append(res.rtt, now.Sub(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	res.rows = int64(len(res.ids))
	close(errc)
	if err := <-errc; err != nil {
		return res, fmt.Errorf("bench: writer: %w", err)
	}
	return res, nil
}

// lockWaitSampler counts, every interval, the schema's sessions waiting on
// an advisory lock; samples x interval estimates the time spent waiting.
type lockWaitSampler struct {
	samples  atomic.Int64
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
}

func (r *runner) sampleLockWaits(ctx context.Context, schema string) (*lockWaitSampler, error) {
	conn, err := r.connect(ctx, "")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &lockWaitSampler{interval: 10 * time.Millisecond, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer conn.Close(context.WithoutCancel(ctx))
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			var n int64
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`, schema).Scan(&n)
			if err == nil {
				s.samples.Add(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s, nil
}

// stop ends sampling and returns the estimated seconds spent waiting.
func (s *lockWaitSampler) stop() float64 {
	s.cancel()
	<-s.done
	return float64(s.samples.Load()) * s.interval.Seconds()
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	if f < 10 {
		return strconv.FormatFloat(f, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(f, 'f', 0, 64) + " ms"
}

// count formats n with thousands separators.
func count(n float64) string {
	s := strconv.FormatInt(int64(n+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// stack is a scratch schema with a fake third party and a running daemon on
// it: what most scenarios start from.
type stack struct {
	s *scratch
	f *fake
	d *daemon
}

// startStack starts a stack; close tears it down in reverse order.
func (r *runner) startStack(ctx context.Context, label string) (*stack, error) {
	s, err := r.newScratch(ctx, label, false)
	if err != nil {
		return nil, err
	}
	f, err := startFake(0)
	if err != nil {
		s.drop(ctx)
		return nil, err
	}
	d, err := r.startDaemon(ctx, s, f, false)
	if err != nil {
		f.close()
		s.drop(ctx)
		return nil, err
	}
	return &stack{s: s, f: f, d: d}, nil
}

func (st *stack) close(ctx context.Context) {
	_ = st.d.stop()
	st.f.close()
	st.s.drop(ctx)
}
