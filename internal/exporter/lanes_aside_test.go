package exporter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// tenantFaults sits before the fake: a tenant it is told is down has its
// requests taken by its account and answered 503 all the same (a proxy's
// answer after the origin took the batch: the batch may have reached,
// and must go again under its key only). It logs each tenant's requests'
// Idempotency-Keys.
type tenantFaults struct {
	mu   sync.Mutex
	down map[string]bool
	// hang are tenants whose requests get no answer until the client
	// gives up (taken by the account all the same).
	hang map[string]bool
	keys map[string][]sentKey
}

func (f *tenantFaults) setHang(tenant string, hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang == nil {
		f.hang = map[string]bool{}
	}
	f.hang[tenant] = hang
}

type sentKey struct {
	key  string
	down bool // answered 503 by the fault
}

func (f *tenantFaults) setDown(tenant string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[string]bool{}
	}
	f.down[tenant] = down
}

// sent returns the keys of tenant's batch requests, in arrival order.
func (f *tenantFaults) sent(tenant string) []sentKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentKey(nil), f.keys[tenant]...)
}

func (f *tenantFaults) serve(w http.ResponseWriter, r *http.Request, fake http.Handler) {
	rest, ok := strings.CutPrefix(r.URL.Path, fakethirdparty.TenantPrefix)
	tenant, _, _ := strings.Cut(rest, "/")
	key := r.Header.Get("Idempotency-Key")
	if !ok || key == "" {
		fake.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	hang := f.hang[tenant]
	down := f.down[tenant] || hang
	if f.keys == nil {
		f.keys = map[string][]sentKey{}
	}
	f.keys[tenant] = append(f.keys[tenant], sentKey{key: key, down: down})
	f.mu.Unlock()
	if hang {
		fake.ServeHTTP(httptest.NewRecorder(), r)
		<-r.Context().Done()
		return
	}
	if !down {
		fake.ServeHTTP(w, r)
		return
	}
	fake.ServeHTTP(httptest.NewRecorder(), r)
	http.Error(w, "upstream answer lost", http.StatusServiceUnavailable)
}

// recordedKeys are the keys of tenant's batches recorded and not marked.
func (b *tenantBundle) recordedKeys(t *testing.T, tenant string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT key FROM syncer_batches WHERE salt LIKE '%/tenant=' || $1 ORDER BY seq`, tenant)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		out = append(out, k)
	}
	require.NoError(t, rows.Err())
	return out
}

// firstAfterHeal is the key of tenant's first request answered by its
// account itself (not by the fault).
func firstAfterHeal(sent []sentKey) string {
	for _, s := range sent {
		if !s.down {
			return s.key
		}
	}
	return ""
}

// requireOneKeyEach checks the accounts' books: no pair accepted under two
// keys, no key reused for other pairs, versions in order, no id in two
// unanswered requests.
func (b *tenantBundle) requireOneKeyEach(t *testing.T) {
	t.Helper()
	st := b.fake.TenantStats().Total
	require.Zero(t, st.DuplicatesOtherKey, "pairs accepted under two keys")
	require.Zero(t, st.KeyConflicts)
	require.Zero(t, st.OutOfOrder)
	require.Zero(t, st.OverlappingIDs)
}

// A lane with two tenants: acme's account takes its batch but answers 503,
// so the batch may have reached and stays recorded; acme is set aside,
// and globex's rows, written before and after, all arrive meanwhile,
// within the same job. Once acme's account heals, its recorded batch goes
// again under the same Idempotency-Key first, then its rows written
// since: every row of both arrives, none under two keys.
func TestTenantAsideWhileItsAccountFails(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 1, nil)
	b.faults.setDown("acme", true)
	b.daemon(t, &tenantDests{url: b.url, breakerOpen: 300 * time.Millisecond}, 0, 1)
	b.exec(t, `INSERT INTO contacts SELECT i, 'globex', 'g' FROM generate_series(1, 20) i`)
	b.exec(t, `INSERT INTO contacts SELECT i, 'acme', 'a' FROM generate_series(21, 40) i`)
	require.Eventually(t, func() bool { return len(b.recordedKeys(t, "acme")) > 0 }, 30*time.Second, 20*time.Millisecond,
		"acme's batch is kept recorded")
	b.waitDelivered(t, "globex", 20, "globex's rows written before")

	// While acme's account keeps failing, globex's new rows go.
	b.exec(t, `INSERT INTO contacts SELECT i, 'globex', 'g' FROM generate_series(41, 60) i`)
	b.exec(t, `INSERT INTO contacts SELECT i, 'acme', 'a' FROM generate_series(61, 70) i`)
	b.waitDelivered(t, "globex", 40, "globex's rows written while acme fails")
	require.Equal(t, 30, b.pending(t, "acme"), "acme's rows wait")
	recorded := b.recordedKeys(t, "acme")
	require.NotEmpty(t, recorded, "acme's batch is still recorded")
	for _, s := range b.faults.sent("acme") {
		require.Contains(t, recorded, s.key, "nothing of acme's but its recorded batches was sent")
	}

	b.faults.setDown("acme", false)
	b.waitDelivered(t, "acme", 30, "acme's rows go once its account heals")
	require.Equal(t, recorded[0], firstAfterHeal(b.faults.sent("acme")), "its recorded batch first, under its key")
	require.Empty(t, b.recordedKeys(t, "acme"))
	require.ElementsMatch(t, append(ids(21, 40), ids(61, 70)...), keysOf(b.latest("acme")))
	b.requireOneKeyEach(t)
}

// A tenant refused (401) with a batch recorded holds alone: the other
// tenant of its lane goes on, and a new token for it sends its recorded
// batch under its key, then its rows.
func TestTenantAsideRefusedThenNewToken(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 1, nil)
	b.faults.setDown("acme", true)
	b.daemon(t, &tenantDests{url: b.url, breakerOpen: 300 * time.Millisecond}, 0, 1)
	b.exec(t, `INSERT INTO contacts SELECT i, 'acme', 'a' FROM generate_series(1, 10) i`)
	require.Eventually(t, func() bool {
		keys := b.recordedKeys(t, "acme")
		for _, s := range b.faults.sent("acme") {
			if s.down && len(keys) > 0 && s.key == keys[0] {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "acme's recorded batch reached its account, answered 503")
	// Its account now refuses its token.
	b.fake.RevokeTenant("acme")
	b.faults.setDown("acme", false)
	b.exec(t, `INSERT INTO contacts SELECT i, 'globex', 'g' FROM generate_series(11, 30) i`)
	b.exec(t, `INSERT INTO contacts SELECT i, 'acme', 'a' FROM generate_series(31, 35) i`)
	b.waitDelivered(t, "globex", 20, "globex goes while acme is refused")
	require.Equal(t, 15, b.pending(t, "acme"))
	recorded := b.recordedKeys(t, "acme")
	require.NotEmpty(t, recorded)
	var failed int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM syncer_source_failures`).Scan(&failed))
	require.Zero(t, failed, "pending, never failed")

	b.fake.RestoreTenant("acme", "")
	b.waitDelivered(t, "acme", 15, "a new token sends acme's rows")
	require.Empty(t, b.recordedKeys(t, "acme"))
	for _, s := range b.faults.sent("acme") {
		if !s.down {
			require.Equal(t, recorded[0], s.key, "the recorded batch went first, under its key")
			break
		}
	}
	b.requireOneKeyEach(t)
}

// Across takeovers: two daemons pass a one-lane source back and forth
// (each run ends after a second), so acme's recorded batch is found by
// the next holder's resume: it sets acme aside without holding globex,
// and sends the batch under its key once acme's account heals.
func TestTenantAsideAcrossTakeovers(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 1, nil)
	b.faults.setDown("acme", true)
	b.daemon(t, &tenantDests{url: b.url, breakerOpen: 300 * time.Millisecond}, time.Second, 2)
	b.daemon(t, &tenantDests{url: b.url, breakerOpen: 300 * time.Millisecond}, time.Second, 2)
	b.exec(t, `INSERT INTO contacts SELECT i, 'acme', 'a' FROM generate_series(1, 10) i`)
	require.Eventually(t, func() bool { return len(b.recordedKeys(t, "acme")) > 0 }, 30*time.Second, 20*time.Millisecond)
	for round := range 4 {
		from := 100 + round*10
		b.exec(t, `INSERT INTO contacts SELECT i, 'globex', 'g' FROM generate_series($1::int, $1::int + 9) i`, from)
		b.waitDelivered(t, "globex", 10*(round+1), "globex goes while acme fails, whoever holds the lane")
		time.Sleep(700 * time.Millisecond) // the lane changes hands meanwhile
	}
	recorded := b.recordedKeys(t, "acme")
	require.NotEmpty(t, recorded)
	require.Equal(t, 10, b.pending(t, "acme"))

	b.faults.setDown("acme", false)
	b.waitDelivered(t, "acme", 10, "")
	require.Equal(t, recorded[0], firstAfterHeal(b.faults.sent("acme")))
	b.requireOneKeyEach(t)
}

// A tenant whose account takes its batch and never answers: past
// TenantPushLimit its push is cut short, the batch may have reached, and
// it is kept recorded; the other tenant goes on meanwhile and after, and
// once the account answers again the batch goes under its key first.
func TestTenantAsideAfterAHangingPush(t *testing.T) {
	t.Parallel()
	b := tenantSetup(t, 1, nil)
	b.faults.setHang("acme", true)
	b.daemon(t, &tenantDests{url: b.url, breakerOpen: 300 * time.Millisecond}, 0, 1)
	b.exec(t, `INSERT INTO contacts SELECT i, 'acme', 'a' FROM generate_series(1, 10) i`)
	require.Eventually(t, func() bool { return len(b.faults.sent("acme")) > 0 }, 30*time.Second, 20*time.Millisecond)
	b.exec(t, `INSERT INTO contacts SELECT i, 'globex', 'g' FROM generate_series(11, 20) i`)
	b.waitDelivered(t, "globex", 10, "globex goes while acme's push hangs")
	// Past the push limit, and after it.
	time.Sleep(exporter.TenantPushLimit)
	b.exec(t, `INSERT INTO contacts SELECT i, 'globex', 'g' FROM generate_series(21, 30) i`)
	b.waitDelivered(t, "globex", 20, "globex goes after acme's push was cut short")
	recorded := b.recordedKeys(t, "acme")
	require.NotEmpty(t, recorded, "acme's batch is kept recorded")
	require.Equal(t, 10, b.pending(t, "acme"))

	b.faults.setHang("acme", false)
	require.Eventually(t, func() bool { return b.pending(t, "acme") == 0 && len(b.latest("acme")) == 10 },
		60*time.Second, 20*time.Millisecond)
	require.Equal(t, recorded[0], firstAfterHeal(b.faults.sent("acme")))
	b.requireOneKeyEach(t)
}

// waitDelivered waits until tenant has nothing pending and the fake holds
// n of its keys.
func (b *tenantBundle) waitDelivered(t *testing.T, tenant string, n int, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return b.pending(t, tenant) == 0 && len(b.latest(tenant)) == n },
		30*time.Second, 20*time.Millisecond, msg)
}
