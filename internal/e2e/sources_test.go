package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/sources"
)

// destination is a fake third party behind a handler that keeps every
// request body, so tests can look at payloads.
type destination struct {
	fake *fakethirdparty.Server
	url  string

	mu     sync.Mutex
	bodies [][]byte
}

func newDestination(t *testing.T, cfg fakethirdparty.Config) *destination {
	t.Helper()
	d := &destination{fake: fakethirdparty.New(cfg)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		d.bodies = append(d.bodies, body)
		d.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		d.fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	d.url = srv.URL
	return d
}

// payloads returns the last payload sent for every id (tombstones
// excluded).
func (d *destination) payloads(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]json.RawMessage{}
	for _, b := range d.bodies {
		var w struct {
			Items []struct {
				ID      string          `json:"id"`
				Payload json.RawMessage `json:"payload"`
				Deleted bool            `json:"deleted"`
			} `json:"items"`
		}
		if json.Unmarshal(b, &w) != nil {
			continue
		}
		for _, it := range w.Items {
			if !it.Deleted {
				out[it.ID] = it.Payload
			}
		}
	}
	return out
}

// byID returns the fake's accepted deliveries grouped by wire id, in the
// order accepted.
func byID(d *fakethirdparty.Server) map[string][]fakethirdparty.Delivery {
	out := map[string][]fakethirdparty.Delivery{}
	for _, dl := range d.Deliveries() {
		id := dl.Text
		if id == "" {
			id = fmt.Sprint(dl.ID)
		}
		out[id] = append(out[id], dl)
	}
	return out
}

// requireOnceInOrder checks that every (id, version) was accepted once and
// the versions of each id only increased.
func requireOnceInOrder(t *testing.T, d *fakethirdparty.Server) {
	t.Helper()
	st := d.Stats()
	require.Zero(t, st.DuplicatesOtherKey, "a pair under two keys")
	require.Zero(t, st.OutOfOrder, "versions out of order")
	for id, dls := range byID(d) {
		for i := 1; i < len(dls); i++ {
			require.Greater(t, dls[i].Version, dls[i-1].Version, "id %s", id)
		}
	}
}

// sourcesConfig parses a SYNCER_CONFIG file with tokens from env.
func sourcesConfig(t *testing.T, text string, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(text), func(k string) string { return env[k] })
	require.NoError(t, err)
	return cfg
}

// installSources does what `syncer migrate --config` does after the
// migrations.
func (b *bundle) installSources(t *testing.T, cfg *config.Config) {
	t.Helper()
	_, err := sources.Install(context.Background(), b.pool, cfg.SourceSpecs())
	require.NoError(t, err)
}

func (b *bundle) sourceStats(t *testing.T) map[string]sources.Stat {
	t.Helper()
	st, err := sources.Stats(context.Background(), b.pool)
	require.NoError(t, err)
	out := map[string]sources.Stat{}
	for _, s := range st {
		out[s.Name] = s
	}
	return out
}

// waitSourcesDrained waits until the named sources have nothing pending
// and their snapshots are done.
func (b *bundle) waitSourcesDrained(t *testing.T, names ...string) {
	t.Helper()
	waitFor(t, 60*time.Second, "sources drained", func() bool {
		st := b.sourceStats(t)
		for _, n := range names {
			if st[n].PendingKeys > 0 || st[n].Snapshot != sources.SnapshotDone {
				return false
			}
		}
		return true
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

const (
	uuid1 = "00000000-0000-4000-8000-000000000001"
	uuid2 = "00000000-0000-4000-8000-000000000002"
	uuid3 = "00000000-0000-4000-8000-000000000003"
)

// Two application tables, a bigint and a uuid key, and a text-keyed one,
// to two destinations with different tokens and limits: inserts, updates,
// deletes (tombstones) and re-inserts reach the right destination, every
// (id, version) once and in increasing order; a column list sends those
// columns, a source without one the whole row; a rolled-back write sends
// nothing.
func TestSourcesTwoTablesToTwoDestinations(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	crm := newDestination(t, fakethirdparty.Config{Token: "tok-crm"})
	billing := newDestination(t, fakethirdparty.Config{Token: "tok-billing"})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text, total numeric, note text)`)
	b.exec(t, `CREATE TABLE customers (id uuid PRIMARY KEY, name text)`)
	b.exec(t, `CREATE TABLE tags (name text PRIMARY KEY, color text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s
    token_env: CRM_TOKEN
  billing:
    url: %s
    token_env: BILLING_TOKEN
    rate_limit: 100
    rate_burst: 10
    max_in_flight: 2
sources:
  - table: orders
    key: id
    columns: [status, total]
    destination: crm
  - table: customers
    key: id
    destination: billing
  - table: tags
    key: name
    destination: crm
    batch_size: 2
`, crm.url, billing.url), map[string]string{"CRM_TOKEN": "tok-crm", "BILLING_TOKEN": "tok-billing"})
	b.installSources(t, cfg)
	d := b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg; c.GaugeInterval = 50 * time.Millisecond })

	b.exec(t, `INSERT INTO orders SELECT g, 'new', g * 10, 'secret' FROM generate_series(1, 5) g`)
	b.exec(t, `UPDATE orders SET status = 'paid' WHERE id = 2`)
	b.exec(t, `DELETE FROM orders WHERE id = 3`)
	tx, err := b.pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), `INSERT INTO orders VALUES (99, 'never', 1, '')`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(context.Background()))
	b.exec(t, `INSERT INTO customers VALUES ($1, 'ann'), ($2, 'bob'), ($3, 'cy')`, uuid1, uuid2, uuid3)
	b.exec(t, `UPDATE customers SET name = 'bobby' WHERE id = $1`, uuid2)
	b.exec(t, `DELETE FROM customers WHERE id = $1`, uuid3)
	b.exec(t, `INSERT INTO tags VALUES ('red', 'r'), ('blue', 'b'), ('a "quoted" \ tag', 'q'), ('01', 'zero-one')`)
	b.exec(t, `DELETE FROM tags WHERE name = 'blue'`)
	b.waitSourcesDrained(t, "orders", "customers", "tags")

	// Brought back after their tombstones went.
	waitFor(t, 30*time.Second, "tombstones delivered", func() bool {
		return len(byID(crm.fake)["3"]) > 0 && len(byID(billing.fake)[uuid3]) > 0
	})
	b.exec(t, `INSERT INTO orders VALUES (3, 'again', 30, '')`)
	b.exec(t, `INSERT INTO customers VALUES ($1, 'cy again')`, uuid3)
	b.waitSourcesDrained(t, "orders", "customers", "tags")

	crmIDs, billingIDs := byID(crm.fake), byID(billing.fake)
	require.Equal(t, []string{"01", "1", "2", "3", "4", "5", `a "quoted" \ tag`, "blue", "red"}, keys(crmIDs))
	require.Equal(t, []string{uuid1, uuid2, uuid3}, keys(billingIDs))
	requireOnceInOrder(t, crm.fake)
	requireOnceInOrder(t, billing.fake)
	require.Zero(t, crm.fake.Stats().RequestsByStatus["401"], "crm's token")
	require.Zero(t, billing.fake.Stats().RequestsByStatus["401"], "billing's token")

	// Deletes went as tombstones, re-inserts above them.
	o3 := crmIDs["3"]
	require.Len(t, o3, 2)
	require.True(t, o3[0].Deleted)
	require.False(t, o3[1].Deleted)
	c3 := billingIDs[uuid3]
	require.True(t, c3[len(c3)-2].Deleted)
	require.False(t, c3[len(c3)-1].Deleted)
	require.True(t, crmIDs["blue"][len(crmIDs["blue"])-1].Deleted)

	// A column list sends its columns; the whole row otherwise.
	crmPayloads, billingPayloads := crm.payloads(t), billing.payloads(t)
	require.JSONEq(t, `{"status": "paid", "total": 20}`, string(crmPayloads["2"]))
	require.JSONEq(t, `{"status": "again", "total": 30}`, string(crmPayloads["3"]))
	require.JSONEq(t, fmt.Sprintf(`{"id": %q, "name": "bobby"}`, uuid2), string(billingPayloads[uuid2]))
	require.JSONEq(t, `{"name": "a \"quoted\" \\ tag", "color": "q"}`, string(crmPayloads[`a "quoted" \ tag`]))
	for id, p := range crmPayloads {
		require.NotContains(t, string(p), "secret", "id %s: a column not configured was sent", id)
	}

	// Metrics labelled by source and destination.
	waitFor(t, 30*time.Second, "source metrics", func() bool {
		resp, err := http.Get("http://" + d.addr + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		text, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return strings.Contains(string(text), `syncer_source_items_exported_total{destination="billing",source="customers"}`) &&
			strings.Contains(string(text), `syncer_source_pending{destination="crm",source="orders"} 0`)
	})
}

// Two daemons share three sources: each (id, version) reaches its
// destination once, whoever exports it.
func TestSourcesTwoDaemonsShareThreeSources(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	// Answers slow enough, and batches many enough, that three sources on
	// two daemons would overlap at the destination without its lock: each
	// daemon alone keeps max_in_flight, two together would not.
	dest := newDestination(t, fakethirdparty.Config{Latency: 40 * time.Millisecond})
	for _, tbl := range []string{"a", "b", "c"} {
		b.exec(t, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, v int)`, tbl))
	}
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  one:
    url: %s
    max_in_flight: 2
sources:
  - {table: a, key: id, destination: one, batch_size: 7}
  - {table: b, key: id, destination: one, batch_size: 7}
  - {table: c, key: id, destination: one, batch_size: 7}
`, dest.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })

	var wg sync.WaitGroup
	for _, tbl := range []string{"a", "b", "c"} {
		wg.Go(func() {
			for i := range 240 {
				key := fmt.Sprintf("%s-%d", tbl, i%80)
				_, err := b.pool.Exec(context.Background(),
					fmt.Sprintf(`INSERT INTO %s VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = excluded.v`, tbl), key, i)
				if err != nil {
					t.Errorf("write %s: %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.waitSourcesDrained(t, "a", "b", "c")

	ids := byID(dest.fake)
	require.Len(t, ids, 240)
	requireOnceInOrder(t, dest.fake)
	require.LessOrEqual(t, dest.fake.Stats().MaxInFlight, int64(2), "one destination's requests in flight hold across the two daemons")
	require.Zero(t, dest.fake.Stats().DuplicatesSameKey+dest.fake.Stats().DuplicatesOtherKey)
	for _, tbl := range []string{"a", "b", "c"} {
		for i := range 80 {
			id := fmt.Sprintf("%s-%d", tbl, i)
			require.NotEmpty(t, ids[id], id)
		}
	}
	payloads := dest.payloads(t)
	require.JSONEq(t, `{"id": "b-79", "v": 239}`, string(payloads["b-79"]))
}

// A configured column dropped from its table stops that source, loudly in
// status, while another source goes on.
func TestSourceDroppedColumnStopsOnlyThatSource(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text, total int)`)
	b.exec(t, `CREATE TABLE notes (id bigint PRIMARY KEY, body text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  one:
    url: %s
sources:
  - {table: orders, key: id, columns: [status], destination: one}
  - {table: notes, key: id, destination: one}
`, dest.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })

	b.exec(t, `ALTER TABLE orders DROP COLUMN status`)
	b.exec(t, `INSERT INTO orders VALUES (1, 10)`)
	b.exec(t, `INSERT INTO notes VALUES (1, 'hello')`)
	b.waitSourcesDrained(t, "notes")
	waitFor(t, 30*time.Second, "the source's error in status", func() bool {
		return b.sourceStats(t)["orders"].Error != ""
	})
	st := b.sourceStats(t)["orders"]
	require.Contains(t, st.Error, "status")
	require.Equal(t, int64(1), st.PendingKeys, "nothing of the stopped source is marked")
	rep := b.report(t)
	var shown bool
	for _, s := range rep.Sources {
		if s.Name == "orders" {
			shown = true
			require.Contains(t, s.Error, "status", "status says why the source stopped")
		}
	}
	require.True(t, shown)
	require.Equal(t, int64(1), rep.Pending, "the contract's keys sum resources and sources")
	payloads := dest.payloads(t)
	require.JSONEq(t, `{"id": 1, "body": "hello"}`, string(payloads["1"]))
	require.Len(t, payloads, 1, "nothing of orders was sent")
}

// Hostile: a destination that answers 303 marks nothing of its source;
// the other destination's source is unaffected.
func TestSourceDestinationRedirectMarksNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	good := newDestination(t, fakethirdparty.Config{})
	var redirected sync.Map
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirected.Store(r.Header.Get("Idempotency-Key"), true)
		http.Redirect(w, r, "https://elsewhere.example/v1/batches", http.StatusSeeOther)
	}))
	t.Cleanup(bad.Close)
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	b.exec(t, `CREATE TABLE customers (id uuid PRIMARY KEY, name text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  bad:
    url: %s
  good:
    url: %s
sources:
  - {table: orders, key: id, destination: bad}
  - {table: customers, key: id, destination: good}
`, bad.URL, good.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })

	b.exec(t, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 10) g`)
	b.exec(t, `INSERT INTO customers VALUES ($1, 'ann'), ($2, 'bob')`, uuid1, uuid2)
	b.waitSourcesDrained(t, "customers")
	waitFor(t, 30*time.Second, "the redirect reached", func() bool {
		n := 0
		redirected.Range(func(any, any) bool { n++; return true })
		return n > 0
	})
	waitFor(t, 30*time.Second, "the refusal recorded for its destination", func() bool {
		st, err := breakerstore.ReadStateOf(context.Background(), b.pool, breakerstore.DestinationNamespace("bad"))
		require.NoError(t, err)
		return st.Configuration.Refused
	})
	st, err := breakerstore.ReadState(context.Background(), b.pool)
	require.NoError(t, err)
	require.False(t, st.Configuration.Refused, "the resources' destination is not concerned")
	src := b.sourceStats(t)["orders"]
	require.Equal(t, int64(10), src.PendingKeys, "nothing marked synced that the third party did not accept")
	require.Zero(t, src.FailedKeys, "a redirect fails no rows")
	require.Equal(t, []string{uuid1, uuid2}, keys(byID(good.fake)))
	requireOnceInOrder(t, good.fake)
	for _, id := range keys(good.payloads(t)) {
		require.False(t, strings.HasPrefix(id, "1"), "an order went to the good destination")
	}
}

// A configuration alone, without a resources' destination: its sources
// are exported, resources are not, and the resources' events do not pile
// up in the outbox.
func TestSourcesWithoutResourcesDestination(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	cfg := sourcesConfig(t, fmt.Sprintf("destinations:\n  one:\n    url: %s\nsources:\n  - {table: orders, key: id, destination: one}\n", dest.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg; c.ThirdParty.URL = "" })

	b.exec(t, `INSERT INTO resources (payload) VALUES ('{"a": 1}')`)
	b.exec(t, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 3) g`)
	b.waitSourcesDrained(t, "orders")
	require.Equal(t, []string{"1", "2", "3"}, keys(byID(dest.fake)))
	waitFor(t, 30*time.Second, "the resources' events consumed", func() bool {
		return b.scalar(t, `SELECT count(*) FROM syncer_outbox`) == 0
	})
	require.Zero(t, b.fake.Stats().Requests, "resources have no destination here")
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM resources WHERE synced_at IS NULL`))
}
