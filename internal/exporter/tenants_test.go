package exporter_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	syncerformat "github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

// tenantDests is a tiny exporter.TenantDestinations: one deliverer per
// tenant, each to the fake's account of the tenant (/t/{tenant}), built at
// first use. Tenants in unconnected have no destination.
type tenantDests struct {
	url string

	mu          sync.Mutex
	ds          map[string]*delivery.Deliverer
	clients     []*thirdparty.Client
	unconnected map[string]bool
	pushes      atomic.Int64 // batches delivered through it
	// breakerOpen is each deliverer's BreakerOpenTimeout (0: the default).
	breakerOpen time.Duration
	// rateLimit is each deliverer's RateLimit (0: none); rates, where it
	// names the tenant, its own.
	rateLimit float64
	rates     map[string]float64
}

func (d *tenantDests) For(_ context.Context, tenant string) (exporter.Destination, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.unconnected[tenant] {
		return nil, errors.New("unconnected: no connection row for the tenant")
	}
	if dl := d.ds[tenant]; dl != nil {
		return counted{dl, &d.pushes}, nil
	}
	c, err := thirdparty.New(&thirdparty.Config{URL: d.url + fakethirdparty.TenantPrefix + url.PathEscape(tenant)})
	if err != nil {
		return nil, err
	}
	dl, err := delivery.New(c, nil, &delivery.Config{Name: "crm", Installation: "test", Format: syncerformat.Format{},
		MaxInFlight: 2, RateLimit: cmp.Or(d.rates[tenant], d.rateLimit), AuthProbeInterval: 300 * time.Millisecond, BreakerOpenTimeout: d.breakerOpen, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		c.Close()
		return nil, err
	}
	if d.ds == nil {
		d.ds = map[string]*delivery.Deliverer{}
	}
	d.ds[tenant], d.clients = dl, append(d.clients, c)
	return counted{dl, &d.pushes}, nil
}

func (d *tenantDests) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.clients {
		c.Close()
	}
}

// counted counts the batches delivered, and keeps the deliverer's Ready.
type counted struct {
	*delivery.Deliverer
	n *atomic.Int64
}

func (c counted) Deliver(ctx context.Context, b delivery.Batch) (*delivery.Outcome, error) {
	c.n.Add(1)
	return c.Deliverer.Deliver(ctx, b)
}

type tenantBundle struct {
	pool   *pgxpool.Pool
	schema string
	fake   *fakethirdparty.Server
	faults *tenantFaults
	url    string
	src    *sources.Source
	// bodyTag is the source's BodyTag: "" skips nothing.
	bodyTag string
	// workers is each daemon's River MaxWorkers: 0 for 8.
	workers int
	// lingering is each daemon's MaxLingering: 0 for 7.
	lingering int
	// batch is each daemon's BatchSize: 0 for 100.
	batch int
}

// tenantSetup makes a table contacts with a tenant column account, its
// source in lanes, and the fake third party; slow delays the answers of
// the tenants it names.
func tenantSetup(t *testing.T, lanes int, slow map[string]time.Duration) *tenantBundle {
	t.Helper()
	return tenantSetupWith(t, lanes, slow, "")
}

// tenantSetupWith is tenantSetup with extra lines in the source's
// configuration.
func tenantSetupWith(t *testing.T, lanes int, slow map[string]time.Duration, extra string) *tenantBundle {
	t.Helper()
	ts := dbtest.NewMigrated(t)
	ctx := context.Background()
	_, err := ts.Pool.Exec(ctx, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL, name text)`)
	require.NoError(t, err)
	cfg, err := config.Parse([]byte("destinations:\n  crm:\n    url: http://127.0.0.1:1\nsources:\n  - table: contacts\n    key: id\n    tenant: account\n    lanes: "+
		strconv.Itoa(lanes)+"\n    destination: crm\n    snapshot: false\n"+extra), nil)
	require.NoError(t, err)
	_, err = sources.Install(ctx, ts.Pool, cfg.SourceSpecs())
	require.NoError(t, err)
	srcs, err := sources.Resolve(ctx, ts.Pool, cfg.SourceSpecs())
	require.NoError(t, err)
	fake := fakethirdparty.New(fakethirdparty.Config{})
	faults := &tenantFaults{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for tenant, d := range slow {
			if strings.HasPrefix(r.URL.Path, fakethirdparty.TenantPrefix+tenant+"/") {
				time.Sleep(d)
			}
		}
		faults.serve(w, r, fake)
	}))
	t.Cleanup(func() {
		fake.Close()
		srv.Close()
	})
	return &tenantBundle{pool: ts.Pool, schema: ts.Name, fake: fake, faults: faults, url: srv.URL, src: srcs[0]}
}

// daemon runs what `syncer run` runs of the push path (exporter, River,
// relay) with dests as the source's tenants, until the test ends.
func (b *tenantBundle) daemon(t *testing.T, dests *tenantDests, maxRun time.Duration, peers int) {
	t.Helper()
	n := &atomic.Int64{}
	n.Store(int64(peers))
	b.daemonPeers(t, dests, maxRun, n)
}

// daemonPeers is daemon with the count of daemons read from peers at each
// ask, so a test starts a second daemon and says so.
func (b *tenantBundle) daemonPeers(t *testing.T, dests *tenantDests, maxRun time.Duration, peers *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	locker, err := locks.New(b.pool.Config().ConnConfig, &locks.Config{Lease: true})
	require.NoError(t, err)
	src := exporter.Configured(b.src, unused{}) // Destination names it; Tenants routes
	src.Tenants = dests
	src.BodyTag = b.bodyTag
	exp, err := exporter.New(b.pool, locker, &exporter.Config{Schema: b.schema, Installation: "test", Sources: []exporter.Source{src},
		Metrics: metrics.New(prometheus.NewRegistry()), BatchSize: cmp.Or(b.batch, 100), MaxItemBytes: 64 << 10, MaxRun: maxRun, MaxLingering: cmp.Or(b.lingering, 7), Logger: testLogger(),
		Peers: func(context.Context, string) (int, error) { return int(peers.Load()), nil }})
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, exp.Worker())
	rc, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Schema: b.schema, Queues: map[string]river.QueueConfig{jobs.Queue: {MaxWorkers: cmp.Or(b.workers, 8)}}, Workers: workers,
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond, MaxAttempts: jobs.MaxAttempts,
	})
	require.NoError(t, err)
	relay, err := outbox.New(b.pool, rc, exp, &outbox.Config{Channel: migrations.Channel(b.schema), LockKey: locks.RelayKey(b.schema),
		PollInterval: 500 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, rc.Start(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(ctx) })
	require.NoError(t, relay.Kick(ctx))
	t.Cleanup(func() {
		exp.Shutdown()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = rc.Stop(sctx)
		scancel()
		cancel()
		wg.Wait()
		locker.Close()
		dests.close()
	})
}

func (b *tenantBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

func (b *tenantBundle) pending(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT key) FROM syncer_changes WHERE source = 'contacts' AND tenant = $1`, tenant).Scan(&n))
	return n
}

// latest is what tenant's account holds: each id's latest delivery.
func (b *tenantBundle) latest(tenant string) map[string]fakethirdparty.Delivery {
	out := map[string]fakethirdparty.Delivery{}
	for _, d := range b.fake.TenantDeliveries(tenant) {
		if d.Text == "" {
			d.Text = strconv.FormatInt(d.ID, 10) // an integer id
		}
		if prev, ok := out[d.Text]; !ok || d.Version > prev.Version {
			out[d.Text] = d
		}
	}
	return out
}

func ids(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

func keysOf(m map[string]fakethirdparty.Delivery) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Issue 43: each tenant's rows reach its own account only (so no request
// holds two tenants' rows: every request goes to one account), and a row
// moved to another tenant leaves the old account as a tombstone and
// arrives at the new one.
func TestTenantRoutingAndMove(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 4, nil)
	b.daemon(t, &tenantDests{url: b.url}, 0, 1)
	b.exec(t, `INSERT INTO contacts SELECT i, 'acme', 'a' || i FROM generate_series(1, 250) i`)
	b.exec(t, `INSERT INTO contacts SELECT i, 'globex', 'g' || i FROM generate_series(251, 300) i`)
	b.exec(t, `INSERT INTO contacts SELECT i, 'in/itech', 'i' || i FROM generate_series(301, 303) i`)
	want := map[string][]string{"acme": ids(1, 250), "globex": ids(251, 300), "in/itech": ids(301, 303)}
	defer func() {
		if t.Failed() {
			for k, v := range b.fake.TenantStats().Tenants {
				t.Log(k, v.ItemsAccepted, len(b.latest(k)))
			}
		}
	}()
	require.Eventually(t, func() bool {
		for tenant, keys := range want {
			if len(b.latest(tenant)) != len(keys) {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond)
	for tenant, keys := range want {
		require.ElementsMatch(t, keys, keysOf(b.latest(tenant)), "tenant %s: its rows only", tenant)
		require.Eventually(t, func() bool { return b.pending(t, tenant) == 0 }, 10*time.Second, 20*time.Millisecond, "marked")
	}
	require.Len(t, b.fake.TenantStats().Tenants, 3, "no other account was asked")

	// A row too large to send is failed for its tenant, not left pending.
	b.exec(t, `INSERT INTO contacts VALUES (400, 'acme', repeat('x', 70000))`)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM syncer_source_failures WHERE key = '400' AND tenant = 'acme'`).Scan(&n))
		return n == 1 && b.pending(t, "acme") == 0
	}, 10*time.Second, 20*time.Millisecond, "oversize: failed for its tenant")

	b.exec(t, `UPDATE contacts SET account = 'globex' WHERE id = 7`)
	defer func() {
		if t.Failed() {
			rows, _ := b.pool.Query(context.Background(), `SELECT seq, key, deleted, tenant, lane FROM syncer_changes`)
			for rows.Next() {
				v, _ := rows.Values()
				t.Log(v...)
			}
			t.Log(b.latest("acme")["7"], b.latest("globex")["7"])
		}
	}()
	require.Eventually(t, func() bool {
		old, now := b.latest("acme")["7"], b.latest("globex")["7"]
		return old.Deleted && now.Text == "7" && !now.Deleted
	}, 30*time.Second, 50*time.Millisecond, "a tombstone at the old tenant, the row at the new")

	// The key's story names the tenant each version went to.
	require.Eventually(t, func() bool {
		st, err := history.Lookup(context.Background(), b.pool, b.src.Name, "7", 0)
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, v := range st.Versions {
			for _, e := range v.Entries {
				if e.Outcome == history.Accepted {
					seen[e.Tenant+"/"+strconv.FormatBool(v.Deleted)] = true
				}
			}
		}
		return seen["acme/false"] && seen["acme/true"] && seen["globex/false"]
	}, 10*time.Second, 50*time.Millisecond, "the story names each version's tenant")
}

// A tenant whose account refuses its credentials (401) or that has no
// connection holds alone: its rows stay pending, never failed, while the
// other tenants drain; once the account takes the token again and the
// connection appears, they go.
func TestTenantRefusedAndUnconnectedWhileOthersDrain(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 2, nil)
	b.fake.RevokeTenant("refused")
	dests := &tenantDests{url: b.url, unconnected: map[string]bool{"lonely": true}}
	b.daemon(t, dests, 0, 1)
	b.exec(t, `INSERT INTO contacts SELECT i, 't' || (i % 10), 'x' FROM generate_series(1, 500) i`)
	b.exec(t, `INSERT INTO contacts SELECT i, 'refused', 'x' FROM generate_series(501, 520) i`)
	b.exec(t, `INSERT INTO contacts SELECT i, 'lonely', 'x' FROM generate_series(521, 525) i`)
	require.Eventually(t, func() bool {
		for i := range 10 {
			if len(b.latest("t"+strconv.Itoa(i))) != 50 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "the other tenants drain")
	require.Equal(t, 20, b.pending(t, "refused"))
	require.Equal(t, 5, b.pending(t, "lonely"))
	var failed int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM syncer_source_failures`).Scan(&failed))
	require.Zero(t, failed, "pending, never failed")
	require.Empty(t, b.fake.TenantDeliveries("refused"))

	b.fake.RestoreTenant("refused", "")
	dests.mu.Lock()
	delete(dests.unconnected, "lonely")
	dests.mu.Unlock()
	require.Eventually(t, func() bool {
		return len(b.latest("refused")) == 20 && len(b.latest("lonely")) == 5
	}, 30*time.Second, 50*time.Millisecond, "they go once the account and the connection are back")
}

// Fairness: a tenant with a backlog of 20,000 rows against a slow account
// (100 ms an answer) does not hold a one-row tenant of the same lane: its
// row arrives while the backlog is still mostly pending.
func TestTenantBacklogDoesNotHoldAnother(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 1, map[string]time.Duration{"big": 100 * time.Millisecond})
	b.daemon(t, &tenantDests{url: b.url}, 0, 1)
	b.exec(t, `INSERT INTO contacts SELECT i, 'big', 'x' FROM generate_series(1, 20000) i`)
	require.Eventually(t, func() bool { return len(b.fake.TenantDeliveries("big")) > 0 }, 30*time.Second, 20*time.Millisecond)
	var worst time.Duration
	for i := range 3 {
		id := 100_000 + i
		start := time.Now()
		b.exec(t, `INSERT INTO contacts VALUES ($1, 'small', 'x')`, id)
		require.Eventually(t, func() bool { _, ok := b.latest("small")[strconv.Itoa(id)]; return ok }, 30*time.Second, 5*time.Millisecond)
		worst = max(worst, time.Since(start))
	}
	left := b.pending(t, "big")
	t.Logf("one-row tenant's worst commit-to-receipt: %s; the backlog still pending: %d of 20000", worst, left)
	require.Greater(t, left, 10_000, "the one-row tenant's rows did not wait for the backlog")
}

// unused is the source's Destination: it names the destination, and a
// tenant source never sends to it.
type unused struct{}

func (unused) Deliver(context.Context, delivery.Batch) (*delivery.Outcome, error) {
	return nil, errors.New("a tenant source's batch went to Source.Destination")
}
func (unused) MaxInFlight() int { return 1 }

// testLogger logs to stderr at debug when SYNCER_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("SYNCER_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Migration 028: the unchanged-body skip is on for a tenant source, its
// digests kept per (tenant, key): a row moved to another tenant with the
// same body (the tenant column not exported) is sent to the new tenant's
// account, never skipped for the body the old one's holds.
func TestTenantMovedRowIsNotSkippedAtTheNewTenant(t *testing.T) {
	t.Parallel()
	b := tenantSetupWith(t, 4, nil, "    columns: [name]\n")
	b.bodyTag = "tag"
	b.daemon(t, &tenantDests{url: b.url}, 0, 1)
	b.exec(t, `INSERT INTO contacts VALUES (1, 'acme', 'a'), (2, 'acme', 'b')`)
	require.Eventually(t, func() bool { return len(b.latest("acme")) == 2 && b.pending(t, "acme") == 0 },
		30*time.Second, 20*time.Millisecond)
	var n int
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM syncer_source_digests WHERE feed = 'contacts' AND tenant = 'acme'`).Scan(&n))
		return n == 2
	}, 10*time.Second, 20*time.Millisecond, "acme's digests are kept: the skip is on")

	b.exec(t, `UPDATE contacts SET account = 'globex' WHERE id = 1`)
	require.Eventually(t, func() bool {
		old, now := b.latest("acme")["1"], b.latest("globex")["1"]
		return old.Deleted && now.Text == "1" && !now.Deleted
	}, 30*time.Second, 20*time.Millisecond, "the same body is sent to globex, and a tombstone to acme")
	require.Eventually(t, func() bool { return b.pending(t, "globex") == 0 && b.pending(t, "acme") == 0 }, 10*time.Second, 20*time.Millisecond)
	var skipped int64
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT COALESCE((SELECT skipped FROM syncer_skips WHERE feed = 'contacts'), 0)`).Scan(&skipped))
	require.Zero(t, skipped)
}
