package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// tenantsWithQuery is setupTenants' world (contacts of acme, globex and
// initech; globex refused, initech unconnected, umbrella paused with no
// row) whose destination crm has a tenants block reading connections,
// where hooli has a connection row and nothing else. It returns the
// configuration's path.
func tenantsWithQuery(t *testing.T) (*bundle, string) {
	t.Helper()
	ctx := context.Background()
	yaml := "destinations:\n  crm:\n    url: http://127.0.0.1:1/t/{tenant}\n    tenants:\n      query: SELECT token FROM connections WHERE account = $1\n" +
		"sources:\n  - {table: contacts, key: id, tenant: account, destination: crm, snapshot: false}\n"
	b := setupConfigured(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account text NOT NULL);
		CREATE TABLE connections (account text PRIMARY KEY, token text NOT NULL)`, yaml)
	_, err := b.pool.Exec(ctx, `INSERT INTO contacts SELECT i, (ARRAY['acme','acme','acme','globex','initech','initech'])[i] FROM generate_series(1, 6) i;
		INSERT INTO connections VALUES ('acme', 'tok-acme'), ('hooli', 'tok-hooli')`)
	require.NoError(t, err)
	store := func(tenant tenant.Tenant) *breakerstore.Store {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", tenant)})
		require.NoError(t, err)
		return s
	}
	_, err = store("umbrella").SetHold(ctx, breakerstore.Hold{Paused: true, By: "command line"})
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))
	return b, cfg
}

// stateKeys counts the facts syncer keeps of tenant at crm.
func stateKeys(t *testing.T, b *bundle, tenant tenant.Tenant) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM syncer_state WHERE starts_with(key, $1)`,
		breakerstore.TenantNamespace("crm", tenant)+":").Scan(&n))
	return n
}

// Issue 54 point 9, contract 10.1 "Commands name real tenants": pause,
// resume, probe, replay and retry-failed with --tenant T, where T has no
// row in the source, no connection row and no state, exit 2 naming it
// and leave nothing behind; a tenant with a row, a connection row (the
// query of --config) or a state is acted on; pause --force pauses a
// tenant ahead of its first row. On a77f328 `pause --tenant nosuch`
// printed "paused", exit 0, and left a phantom tenant.
func TestTenantCommandsRefuseUnknownTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, cfg := tenantsWithQuery(t)
	db := []string{"--database-url", b.dsn, "--config", cfg}

	for _, args := range [][]string{
		{"pause", "--destination", "crm", "--tenant", "nosuch"},
		{"resume", "--destination", "crm", "--tenant", "nosuch"},
		{"probe", "--destination", "crm", "--tenant", "nosuch"},
		{"replay", "--source", "contacts", "--tenant", "nosuch"},
		{"retry-failed", "--source", "contacts", "--tenant", "nosuch"},
	} {
		r := run(ctx, append(args, "--database-url", b.dsn)...)
		require.Equal(t, 2, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		oneLine(t, r, `destination crm has no tenant "nosuch": no row of source contacts has it, and syncer keeps nothing of it`)
		require.NotContains(t, r.stdout, "paused")
		// With the configuration, the tenants query is asked too.
		r = run(ctx, append(args, db...)...)
		require.Equal(t, 2, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		oneLine(t, r, `destination crm has no tenant "nosuch": no row of source contacts has it, its tenants query gives it no connection row, and syncer keeps nothing of it`)
	}
	require.Zero(t, stateKeys(t, b, "nosuch"), "nothing kept of a tenant that does not exist")

	// A tenant with rows; one with a connection row only (found by the
	// query of --config, refused without it); one with a state only.
	for _, tn := range []string{"acme", "hooli", "umbrella"} {
		r := run(ctx, append([]string{"pause", "--destination", "crm", "--tenant", tn}, db...)...)
		require.Equal(t, 0, r.code, "%s: %s", tn, r.stderr)
		require.Contains(t, r.stdout, "tenant "+tn+" of destination crm paused")
	}
	r := run(ctx, "resume", "--destination", "crm", "--tenant", "hooli", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, "hooli has a state now: %s", r.stderr)
	r = run(ctx, "pause", "--destination", "crm", "--tenant", "hooli2", "--database-url", b.dsn)
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "--force pauses it ahead of its first row")

	// Ahead of its first row: --force, and status shows it paused.
	r = run(ctx, append([]string{"pause", "--destination", "crm", "--tenant", "newco", "--force"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	r = run(ctx, "status", "--json", "--source", "contacts", "--tenant", "newco", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	var one status.Tenant
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
	require.Equal(t, "paused", one.State)
	r = run(ctx, "pause", "--destination", "crm", "--force", "--database-url", b.dsn)
	require.Equal(t, 2, r.code, "--force goes with --tenant: %s", r.stderr)

	// replay and retry-failed of a tenant with rows go on.
	r = run(ctx, append([]string{"replay", "--source", "contacts", "--tenant", "initech", "--dry-run"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "would send 2 keys of source contacts tenant initech")
	r = run(ctx, "retry-failed", "--source", "contacts", "--tenant", "globex", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
}

// Issue 54 point 10, contract 10.1: status names every paused tenant,
// with or without pending rows (text and JSON), and resume --destination
// says which of its tenants stay paused. On a77f328 the resume said
// "every running daemon sends to it again" and a paused tenant with
// nothing pending was named nowhere.
func TestPausedTenantsAreNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := tenantsWithQuery(t)
	r := run(ctx, "pause", "--destination", "crm", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)

	r = run(ctx, "status", "--json", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	var raw struct {
		Sources []struct {
			Tenants map[string]json.RawMessage `json:"tenants"`
		} `json:"sources"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	require.Len(t, raw.Sources, 1)
	require.JSONEq(t, `["acme", "umbrella"]`, string(raw.Sources[0].Tenants["paused"]),
		"acme (3 pending) and umbrella (nothing pending) are named")
	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `paused tenants +acme, umbrella \(syncer resume --destination crm --tenant T\)`, r.stdout)

	r = run(ctx, "pause", "--destination", "crm", "--within", "1s", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	r = run(ctx, "resume", "--destination", "crm", "--within", "1s", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "destination crm resumed: every running daemon sends to it again, except to its 2 tenants still paused on their own: acme, umbrella (syncer resume --destination crm --tenant T)\n", r.stdout)

	for _, tn := range []string{"acme", "umbrella"} {
		r = run(ctx, "resume", "--destination", "crm", "--tenant", tn, "--database-url", b.dsn)
		require.Equal(t, 0, r.code, r.stderr)
	}
	r = run(ctx, "resume", "--destination", "crm", "--within", "1s", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "destination crm resumed: every running daemon sends to it again\n", r.stdout)
}

// Issue 54 point 11: a replay of one tenant is listed with its tenant,
// and its progress (--list, --wait, status) counts that tenant's keys
// only, whatever other tenants hold pending. On a77f328 it was listed as
// "source contacts, all rows" and its progress stayed "0 of 2 keys sent"
// while acme's keys were pending.
func TestReplayOfOneTenantCountsItsOwnKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, cfg := tenantsWithQuery(t)
	// acme's 3 keys stay pending (acme paused, say); the others went.
	_, err := b.pool.Exec(ctx, `DELETE FROM syncer_changes WHERE tenant <> 'acme'`)
	require.NoError(t, err)

	r := run(ctx, "replay", "--source", "contacts", "--tenant", "initech", "--database-url", b.dsn, "--config", cfg)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "2 keys of source contacts tenant initech")
	// The source's job logs the replay's keys, as a daemon's would.
	all, err := sources.Load(ctx, b.pool)
	require.NoError(t, err)
	for done := false; !done; {
		done, err = sources.Snapshot(ctx, b.pool, all[0], 100)
		require.NoError(t, err)
	}
	r = run(ctx, "replay", "--list", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `source contacts, tenant initech, all its rows +0 of 2 keys sent \(2 queued\)`, r.stdout)

	// initech's keys go; acme's stay pending.
	_, err = b.pool.Exec(ctx, `DELETE FROM syncer_changes WHERE tenant = 'initech'`)
	require.NoError(t, err)
	r = run(ctx, "replay", "--list", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `done +source contacts, tenant initech, all its rows +2 of 2 keys sent \(2 queued\)`, r.stdout)
	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `replay \d+ +done, 2 of 2 keys of source contacts tenant initech \(100.0%\)`, r.stdout)
	var rep struct {
		Replays []struct {
			Tenant   string `json:"tenant"`
			RowsDone int64  `json:"rows_done"`
		} `json:"replays"`
	}
	r = run(ctx, "status", "--json", "--database-url", b.dsn)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Replays, 1)
	require.Equal(t, "initech", rep.Replays[0].Tenant)
	require.EqualValues(t, 2, rep.Replays[0].RowsDone)

	// --wait on a replay of globex ends once globex's key went, acme's
	// still pending.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	waited := make(chan result, 1)
	go func() {
		waited <- run(wctx, "replay", "--source", "contacts", "--tenant", "globex", "--wait", "--poll", "50ms",
			"--database-url", b.dsn, "--config", cfg)
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_replays WHERE tenant = 'globex'`).Scan(&n))
		return n == 1
	}, 10*time.Second, 20*time.Millisecond)
	for done := false; !done; {
		done, err = sources.Snapshot(ctx, b.pool, all[0], 100)
		require.NoError(t, err)
	}
	_, err = b.pool.Exec(ctx, `DELETE FROM syncer_changes WHERE tenant = 'globex'`)
	require.NoError(t, err)
	r = <-waited
	require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
	require.Regexp(t, `replay \d+ done: 1 keys sent\n$`, r.stdout)
}

// Issue 54 point 17: the destination's status line says that one of its
// tenants' credentials are refused, not "credentials ok". On a77f328 it
// said "credentials ok" while globex was refused.
func TestDestinationLineSaysATenantIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTenants(t) // globex refused
	r := run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `destination crm +breaker closed, credentials of 1 tenant REFUSED \(see tenants of contacts\), the others ok, `, r.stdout)
	require.NotContains(t, r.stdout, "credentials ok")
}

// Contract 10.1 (issue 54 point 3): a command that asks the tenants
// query whether a tenant has a connection row, with the connections table
// locked by a migration, exits 1 within tenants.timeout (and the client's
// grace) with one line naming tenants.timeout and the lock, never a
// secret of a row. On 68002ef it waited on the lock with no end.
func TestTenantCommandsFailOnALockedConnectionsTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := tenantsWithQuery(t)
	yaml := "destinations:\n  crm:\n    url: http://127.0.0.1:1/t/{tenant}\n    tenants:\n      query: SELECT token FROM connections WHERE account = $1\n      timeout: 1s\n" +
		"sources:\n  - {table: contacts, key: id, tenant: account, destination: crm, snapshot: false}\n"
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))
	lock, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE connections IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	for _, args := range [][]string{
		{"pause", "--destination", "crm", "--tenant", "nosuch"},
		{"replay", "--source", "contacts", "--tenant", "nosuch"},
	} {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		r := run(cctx, append(args, "--database-url", b.dsn, "--config", cfg)...)
		took := time.Since(start)
		cancel()
		t.Logf("%v: exit %d after %s: %s", args, r.code, took.Round(time.Millisecond), r.stderr)
		require.Equal(t, 1, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		require.Less(t, took, 4*time.Second, "%v: tenants.timeout bounds the query", args)
		oneLine(t, r, "tenants.timeout, 1s")
		require.Contains(t, r.stderr, "locked")
		require.NotContains(t, r.stderr+r.stdout, "tok-")
	}
	require.Zero(t, stateKeys(t, b, "nosuch"), "nothing kept of the tenant")
}
