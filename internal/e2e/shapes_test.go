package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// Issue 29: a composite key of text and bigint through the daemon to the
// fake: ('a,b', 3) and ('a', 3) arrive as two ids, each the compact JSON
// array of the key's values; an update and a delete follow, every
// (id, version) once and in order.
func TestCompositeKeyEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	crm := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE line_items (tenant_id text, id bigint, qty int, PRIMARY KEY (tenant_id, id))`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s
sources:
  - table: line_items
    key: [tenant_id, id]
    destination: crm
`, crm.url), nil)
	b.installSources(t, cfg)
	b.exec(t, `INSERT INTO line_items VALUES ('pre', 1, 0)`)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })

	b.exec(t, `INSERT INTO line_items VALUES ('a,b', 3, 1), ('a', 3, 2)`)
	b.waitSourcesDrained(t, "line_items")
	b.exec(t, `UPDATE line_items SET qty = 7 WHERE tenant_id = 'a' AND id = 3`)
	b.exec(t, `DELETE FROM line_items WHERE tenant_id = 'a,b' AND id = 3`)
	b.waitSourcesDrained(t, "line_items")
	waitFor(t, 30*time.Second, "the delete delivered", func() bool {
		dls := byID(crm.fake)[`["a,b",3]`]
		return len(dls) > 0 && dls[len(dls)-1].Deleted
	})

	ids := byID(crm.fake)
	require.Equal(t, []string{`["a",3]`, `["a,b",3]`, `["pre",1]`}, keys(ids))
	requireOnceInOrder(t, crm.fake)
	require.Len(t, ids[`["a",3]`], 2)
	require.False(t, ids[`["a",3]`][1].Deleted)
	require.JSONEq(t, `{"tenant_id": "a", "id": 3, "qty": 7}`, string(crm.payloads(t)[`["a",3]`]))
}

// Issue 29: a Standard Webhooks receiver restarted with another secret
// answers 400 "No matching signature found" to every request, as the
// specification's libraries make it. That is a rejection storm, the
// destination's fault: 0 rows fail, the destination is held with the
// reason in status, and every row is delivered once the secret is fixed.
func TestRejectionStormHoldsTheDestination(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	fakeCfg := fakethirdparty.Config{Format: "standard-webhooks", SigningSecret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("the receiver's new secret")),
		SignatureStatus: http.StatusBadRequest}
	hooks := newDestination(t, fakeCfg)
	b.exec(t, `CREATE TABLE events (id bigint PRIMARY KEY, kind text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  hooks:
    url: %s
    format: standard-webhooks
    signing_secret_env: HOOKS_SECRET
sources:
  - {table: events, key: id, destination: hooks, batch_size: 5}
`, hooks.url), map[string]string{"HOOKS_SECRET": webhookSecret})
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) {
		c.ThirdParty.URL = ""
		c.Sources = cfg
		c.Delivery.AuthProbeInterval = time.Second
	})
	for i := range 6 {
		b.exec(t, `INSERT INTO events SELECT g, 'k' FROM generate_series($1::int, $1::int + 4) g`, i*5+1)
	}
	waitFor(t, 60*time.Second, "the destination held for the storm", func() bool {
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		for _, d := range rep.Destinations {
			if d.Configuration.Refused && strings.Contains(d.Configuration.Message, "No matching signature found") {
				return true
			}
		}
		return false
	})
	require.Zero(t, b.sourceStats(t)["events"].FailedKeys, "a storm fails no row")
	require.Empty(t, hooks.fake.Deliveries())

	fakeCfg.SigningSecret = webhookSecret
	hooks.fake.SetConfig(fakeCfg)
	b.waitSourcesDrained(t, "events")
	require.Len(t, byID(hooks.fake), 30, "every row delivered once the secret is fixed")
	requireOnceInOrder(t, hooks.fake)
	require.Zero(t, b.sourceStats(t)["events"].FailedKeys)
}

// Issue 29: a source with a composite key and a row filter, drained by a
// daemon killed twice (SIGKILL) while writers keep updating, soft-deleting
// and restoring rows: 0 pairs under two keys, versions in order, and 0
// rows lost: the fake ends holding exactly the rows that match, each at
// its last version, and nothing of the rows that never matched.
func TestCompositeFilteredSIGKILLMidDrain(t *testing.T) {
	t.Parallel()
	bin := syncerBinary(t)
	b := setup(t, fakethirdparty.Config{})
	fake := fakethirdparty.New(fakethirdparty.Config{Latency: 3 * time.Millisecond})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	const rows = 2000
	b.exec(t, `CREATE TABLE line_items (tenant_id text, id bigint, qty int, deleted_at timestamptz, PRIMARY KEY (tenant_id, id))`)
	// Every tenth row never matches.
	b.exec(t, `INSERT INTO line_items SELECT 't' || (g % 7), g, g, CASE WHEN g % 10 = 0 THEN now() END FROM generate_series(1, $1) g`, rows)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "syncer.yaml")
	require.NoError(t, os.WriteFile(cfgPath, fmt.Appendf(nil,
		"destinations:\n  dest:\n    url: %s\nsources:\n  - table: line_items\n    key: [tenant_id, id]\n    where: deleted_at IS NULL\n    destination: dest\n    batch_size: 50\n",
		srv.URL), 0o600))
	out, err := exec.Command(bin, "migrate", "--database-url", b.dsn, "--config", cfgPath).CombinedOutput()
	require.NoError(t, err, "%s", out)

	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--database-url", b.dsn, "--config", cfgPath, "--http-addr", freePort(t), "--log-level", "error")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	cmd := start()
	for i, at := range []int64{400, 1000} {
		waitFor(t, time.Minute, "items arriving", func() bool { return fake.Stats().ItemsAccepted >= at })
		// Writes meanwhile: updates, soft deletes, restores, hard deletes.
		b.exec(t, `UPDATE line_items SET qty = qty + 1 WHERE id % 13 = $1`, i)
		b.exec(t, `UPDATE line_items SET deleted_at = now() WHERE id % 17 = $1 AND deleted_at IS NULL`, i)
		b.exec(t, `UPDATE line_items SET deleted_at = NULL WHERE id % 34 = $1`, i)
		b.exec(t, `DELETE FROM line_items WHERE id % 19 = $1`, i)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		cmd = start()
	}

	// What the fake must end holding: every matching row, live.
	want := map[string]bool{}
	rs, err := b.pool.Query(context.Background(), `SELECT '[' || to_jsonb(tenant_id)::text || ',' || id || ']' FROM line_items WHERE deleted_at IS NULL`)
	require.NoError(t, err)
	for rs.Next() {
		var k string
		require.NoError(t, rs.Scan(&k))
		want[k] = true
	}
	require.NoError(t, rs.Err())
	live := func() map[string]bool {
		got := map[string]bool{}
		for id, dls := range byID(fake) {
			if !dls[len(dls)-1].Deleted {
				got[id] = true
			}
		}
		return got
	}
	waitFor(t, 2*time.Minute, "the fake holding the matching rows", func() bool { return len(live()) == len(want) && b.sourceStats(t)["line_items"].PendingKeys == 0 })
	require.Equal(t, want, live(), "0 rows lost, none live that should not be")
	st := fake.Stats()
	require.Zero(t, st.DuplicatesOtherKey, "0 pairs under two keys")
	requireOnceInOrder(t, fake)
	for id := range byID(fake) {
		require.True(t, strings.HasPrefix(id, `["t`), "a composite id: %s", id)
	}
	// Never matched since it was last exported: never sent.
	require.Empty(t, byID(fake)[`["t3",10]`], "a row that never matched")
}
