package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 54 point 16 (contract 10.1, "A new account gets everything"): the
// whole daemon with two destinations reading one connections table. When
// a workspace's row moves it to a new account (url and token), its 9 live
// rows are replayed there, 9 of 9, by a replay recorded with its tenant;
// under tenants.replay_on_change: false they are not (the new account
// gets only what changes after). Before, 1 of 9 arrived: the one row
// updated after the move.
func TestTenantNewAccountGetsEverything(t *testing.T) {
	t.Parallel()
	w := newTenantWorld(t, fakethirdparty.Config{})
	w.exec(t, `CREATE TABLE leads (id bigint PRIMARY KEY, account text NOT NULL, v int NOT NULL DEFAULT 0)`)
	w.exec(t, `CREATE TABLE conns (account_id text PRIMARY KEY, url text NOT NULL, token text NOT NULL)`)
	path := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`destinations:
  crm:
    tenants:
      query: SELECT url, token FROM conns WHERE account_id = $1
  quiet:
    tenants:
      query: SELECT url, token FROM conns WHERE account_id = $1
      replay_on_change: false
sources:
  - {table: contacts, key: id, tenant: account, lanes: 2, destination: crm, batch_size: 10}
  - {table: leads, key: id, tenant: account, lanes: 2, destination: quiet, batch_size: 10}
`), 0o600))
	out, err := exec.Command(w.bin, "migrate", "--database-url", w.dsn, "--config", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	move := func(tenant, account string) {
		w.exec(t, `INSERT INTO conns VALUES ($1, $2, $3) ON CONFLICT (account_id) DO UPDATE SET url = EXCLUDED.url, token = EXCLUDED.token`,
			tenant, w.fakeURL+"/t/"+account, "tok-"+account)
	}
	move("w1", "old1")
	move("w2", "old2")
	w.exec(t, `INSERT INTO contacts SELECT i, 'w1' FROM generate_series(1, 9) i`)
	w.exec(t, `INSERT INTO leads SELECT i, 'w2' FROM generate_series(1, 9) i`)
	_, errOut := w.run(t, w.dsn, path)
	require.Eventually(t, func() bool { return len(w.latest("old1")) == 9 && len(w.latest("old2")) == 9 },
		30*time.Second, 50*time.Millisecond, "the first accounts: %s", errOut)

	move("w1", "new1")
	move("w2", "new2")
	// Read again within 45 s (an idle tenant's row is read again every 15
	// s once 30 s old): every live row of w1 reaches its new account.
	defer func() {
		if t.Failed() {
			rows, _ := w.pool.Query(context.Background(), `SELECT key, convert_from(value, 'UTF8') FROM syncer_state WHERE key LIKE '%account'
				UNION ALL SELECT 'replay ' || id, source || ' ' || COALESCE(tenant, '') || ' ' || state FROM syncer_replays`)
			for rows.Next() {
				v, _ := rows.Values()
				t.Log(v...)
			}
			t.Log(len(w.latest("new1")), len(w.latest("new2")))
		}
	}()
	require.Eventually(t, func() bool { return len(w.latest("new1")) == 9 }, 75*time.Second, 100*time.Millisecond,
		"9 of 9 at the new account: %s", errOut)
	var source, tenant string
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT source, tenant FROM syncer_replays`).Scan(&source, &tenant))
	require.Equal(t, []string{"contacts", "w1"}, []string{source, tenant}, "one replay, of the tenant")

	// replay_on_change: false: w2's rows stay where they went. A row
	// changed (again and again, until its tenant's row is read again) is
	// what reaches new2.
	require.Eventually(t, func() bool {
		w.exec(t, `UPDATE leads SET v = v + 1 WHERE id = 1`)
		return len(w.latest("new2")) > 0
	}, 60*time.Second, time.Second, "w2's row is read again: %s", errOut)
	time.Sleep(2 * time.Second) // a replay's rows would follow within it
	got := w.latest("new2")
	_, one := got[1]
	require.True(t, one && len(got) == 1, "no replay under replay_on_change: false: new2 holds %d ids", len(got))
	var n int
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT count(*) FROM syncer_replays WHERE source = 'leads'`).Scan(&n))
	require.Zero(t, n)
	w.requireTenantsOnceInOrder(t)
}
