package bench

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// tenantFairness: row (b). The big tenant's account answers in 100 ms
// (this process delays its requests before the fake), the 50 small
// tenants' at once.
func (r *runner) tenantFairness(ctx context.Context) (Row, error) {
	sz := r.tenantSizes()
	f, err := startFakeWrapped(fakethirdparty.Config{ExpectedItems: sz.fairRows}, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.HasPrefix(req.URL.Path, "/t/big0/") {
				time.Sleep(100 * time.Millisecond)
			}
			inner.ServeHTTP(w, req)
		})
	})
	if err != nil {
		return Row{}, err
	}
	defer f.close()
	dir, err := os.MkdirTemp("", "syncer-bench-")
	if err != nil {
		return Row{}, err
	}
	defer os.RemoveAll(dir)
	s, path, err := r.tenantScratch(ctx, "tenants-fair", dir, tenantSetup{url: f.url + "/t/{tenant}", tenantCol: true, batch: r.sizes.BatchSize})
	if err != nil {
		return Row{}, err
	}
	defer s.drop(ctx)
	if err := s.preloadTenants(ctx, "big", 1, sz.fairRows); err != nil {
		return Row{}, err
	}
	r.progressf("   fairness: big drains %s rows at 100 ms while %d tenants write a row every 2 s each, for %s", count(float64(sz.fairRows)), sz.fairTenants, sz.fairFor)
	d, err := r.startDaemon(ctx, s, f, false, "--config", path, "--thirdparty-url=")
	if err != nil {
		return Row{}, err
	}
	defer d.stop()
	// big0 (preloadTenants' name for the one tenant "big") sends first.
	for deadline := time.Now().Add(time.Minute); f.TenantStats().Tenants["big0"].Requests == 0; {
		if time.Now().After(deadline) {
			return Row{}, fmt.Errorf("bench: fairness: no request of the big tenant in a minute: %s", d.stderr.String())
		}
		select {
		case <-ctx.Done():
			return Row{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The writers: one row every 2 s for each small tenant, spread evenly.
	var mu sync.Mutex
	committed := map[int64]time.Time{} // id: when its insert committed
	tenantOf := map[int64]string{}
	step := 2 * time.Second / time.Duration(sz.fairTenants)
	end := time.Now().Add(sz.fairFor)
	for i := 0; time.Now().Before(end); i++ {
		tenant := fmt.Sprintf("w%d", i%sz.fairTenants)
		var id int64
		if err := s.pool.QueryRow(ctx, `INSERT INTO contacts (account, status, total) VALUES ($1, 'new', 1) RETURNING id`, tenant).Scan(&id); err != nil {
			return Row{}, fmt.Errorf("bench: fairness: insert: %w", err)
		}
		mu.Lock()
		committed[id], tenantOf[id] = time.Now(), tenant
		mu.Unlock()
		time.Sleep(step)
	}
	bigAt := f.TenantStats().Tenants["big0"]
	// Every small tenant's row received, up to 30 s more.
	received := func() map[int64]time.Time {
		got := map[int64]time.Time{}
		for t := range sz.fairTenants {
			for _, dl := range f.TenantDeliveries(fmt.Sprintf("w%d", t)) {
				if _, ok := got[dl.ID]; !ok {
					got[dl.ID] = dl.At
				}
			}
		}
		return got
	}
	var got map[int64]time.Time
	for deadline := time.Now().Add(30 * time.Second); ; {
		if got = received(); len(got) >= len(committed) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	lat := make([]time.Duration, 0, len(committed))
	missing := 0
	for id, at := range committed {
		rec, ok := got[id]
		if !ok {
			missing++
			continue
		}
		lat = append(lat, max(rec.Sub(at), 0))
	}
	if len(lat) == 0 {
		return Row{}, fmt.Errorf("bench: fairness: no small tenant's row received: %s", d.stderr.String())
	}
	slices.Sort(lat)
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	if missing > 0 {
		p99 = time.Duration(1<<62 - 1) // a row never received fails the target
	}
	bigRate := float64(bigAt.ItemsAccepted) / bigAt.LastRequestAt.Sub(bigAt.FirstRequestAt).Seconds()
	measured := fmt.Sprintf("p99 %s, p50 %s commit to receipt (%d rows of %d tenants, %d not received)", p99Text(p99), p50.Round(time.Millisecond), len(committed), sz.fairTenants, missing)
	return Row{
		Scenario: "tenants: fairness",
		Measured: measured,
		Baseline: fmt.Sprintf("beside big draining %s rows/s of %s at 100 ms", count(bigRate), count(float64(sz.fairRows))),
		Figure:   p99Text(p99),
		Target:   "p99 <= 1s",
		Pass:     missing == 0 && p99 <= time.Second,
		Values:   map[string]float64{"p99_ms": float64(p99.Milliseconds()), "p50_ms": float64(p50.Milliseconds()), "missing": float64(missing), "big_rows_per_s": bigRate},
	}, d.stop()
}

// startFakeWrapped is startFakeWith, its handler wrapped by wrap.
func startFakeWrapped(cfg fakethirdparty.Config, wrap func(http.Handler) http.Handler) (*fake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen for the fake third party: %w", err)
	}
	f := &fake{Server: fakethirdparty.New(cfg)}
	f.srv = &http.Server{Handler: wrap(f.Server), ReadHeaderTimeout: 5 * time.Second}
	f.url = "http://" + ln.Addr().String()
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func p99Text(d time.Duration) string {
	if d > time.Hour {
		return "never"
	}
	return d.Round(time.Millisecond).String()
}

// idleRun is an idle daemon's cost with n connected tenants, each of
// which sent its one row before the measure.
type idleRun struct {
	cpu      float64 // seconds over the window
	sessions int64   // the most of the daemon's sessions seen
}

func (r *runner) idleTenants(ctx context.Context, label string, n int) (idleRun, error) {
	var res idleRun
	sz := r.tenantSizes()
	f, err := startFakeWith(fakethirdparty.Config{})
	if err != nil {
		return res, err
	}
	defer f.close()
	dir, err := os.MkdirTemp("", "syncer-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	s, path, err := r.tenantScratch(ctx, label, dir, tenantSetup{url: f.url + "/t/{tenant}", tenantCol: true, batch: r.sizes.BatchSize, query: true})
	if err != nil {
		return res, err
	}
	defer s.drop(ctx)
	if _, err := s.pool.Exec(ctx, `INSERT INTO connections SELECT 'c' || i FROM generate_series(0, $1::int - 1) i`, n); err != nil {
		return res, fmt.Errorf("bench: connections: %w", err)
	}
	if err := s.preloadTenants(ctx, "c", n, 1); err != nil {
		return res, err
	}
	r.progressf("   %s: %d connected tenants, each one row, then idle for %s", label, n, sz.idleFor)
	profile := r.cfg.ProfileDir != ""
	d, err := r.startDaemon(ctx, s, f, profile, "--config", path, "--thirdparty-url=")
	if err != nil {
		return res, err
	}
	defer d.stop()
	if err := s.waitChanges(ctx, drainLimit(n), d); err != nil {
		return res, err
	}
	time.Sleep(3 * time.Second) // the last jobs end
	before, err := d.cpuSeconds()
	if err != nil {
		return res, err
	}
	// With ProfileDir, a CPU profile of the idle daemon over most of the
	// window: where an idle tenant's cost goes.
	var profiled chan error
	if profile {
		profiled = make(chan error, 1)
		go func() {
			profiled <- d.profile(ctx, max(int(sz.idleFor.Seconds()*2/3), 1), filepath.Join(r.cfg.ProfileDir, label+".cpu.pprof"))
		}()
	}
	own := int64(s.pool.Stat().TotalConns())
	for end := time.Now().Add(sz.idleFor); time.Now().Before(end); time.Sleep(time.Second) {
		var all int64
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, s.name).Scan(&all); err != nil {
			return res, fmt.Errorf("bench: count sessions: %w", err)
		}
		res.sessions = max(res.sessions, all-own)
	}
	after, err := d.cpuSeconds()
	if err != nil {
		return res, err
	}
	res.cpu = after - before
	if profiled != nil {
		if err := <-profiled; err != nil {
			return res, err
		}
	}
	return res, d.stop()
}

// tenantIdle: row (c), one connected tenant then many, same run.
func (r *runner) tenantIdle(ctx context.Context) (Row, error) {
	n := r.tenantSizes().idleTenants
	one, err := r.idleTenants(ctx, "tenants-idle-one", 1)
	if err != nil {
		return Row{}, err
	}
	many, err := r.idleTenants(ctx, "tenants-idle", n)
	if err != nil {
		return Row{}, err
	}
	ratio := many.cpu / max(one.cpu, 0.01)
	for_ := r.tenantSizes().idleFor
	return Row{
		Scenario: "tenants: idle",
		Measured: fmt.Sprintf("%.2fs CPU over %s, %d sessions (%s connected tenants, nothing pending)", many.cpu, for_, many.sessions, count(float64(n))),
		Baseline: fmt.Sprintf("one connected tenant: %.2fs CPU, %d sessions", one.cpu, one.sessions),
		Figure:   fmt.Sprintf("%.2fx CPU, %+d sessions", ratio, many.sessions-one.sessions),
		Target:   "<= 2x CPU, <= 1x+4 sessions",
		Pass:     ratio <= 2 && many.sessions <= one.sessions+4,
		Values:   map[string]float64{"cpu_s": many.cpu, "one_cpu_s": one.cpu, "cpu_ratio": ratio, "sessions": float64(many.sessions), "one_sessions": float64(one.sessions)},
	}, nil
}

// tenantsScenario runs the rows in order, keeping what was measured when
// one fails. With Config.Rows, only the steps that measure a row named
// there run.
func (r *runner) tenantsScenario(ctx context.Context) ([]Row, error) {
	var rows []Row
	var first error
	one := func(fn func(context.Context) (Row, error)) func(context.Context) ([]Row, error) {
		return func(ctx context.Context) ([]Row, error) {
			row, err := fn(ctx)
			if err != nil {
				return nil, err
			}
			return []Row{row}, nil
		}
	}
	type step struct {
		rows []string // the rows it measures
		fn   func(context.Context) ([]Row, error)
	}
	for _, s := range []step{
		{[]string{"tenants: unannounced limits", "tenants: unannounced sustained", "tenants: rate_limit 5"}, r.tenantLimits},
		{[]string{"tenants: two daemons"}, one(r.tenantTwoDaemons)},
		{[]string{"tenants: a daemon joins"}, one(r.tenantJoin)},
		{[]string{"tenants: fairness"}, one(r.tenantFairness)},
		{[]string{"tenants: idle"}, one(r.tenantIdle)},
		{[]string{"tenants: column cost"}, one(r.tenantColumnCost)},
		{[]string{ownSharedRow}, r.tenantOwnShared},
		{[]string{ownQueryRow}, r.tenantOwnQuery},
	} {
		if !slices.ContainsFunc(s.rows, r.cfg.wantsRow) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		got, err := s.fn(ctx)
		rows = append(rows, got...)
		if err != nil {
			r.progressf("   %v", err)
			first = cmp.Or(first, err)
		}
	}
	return rows, first
}
