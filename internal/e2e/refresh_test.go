package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 54 point 1 (contract 10.1, "A refresh token is spent once"):
// a token endpoint that rotates refresh tokens and revokes the whole
// family when a rotated-away one is used again (Auth0, Okta), access
// tokens of 2 s so that the daemon renews every ~1.6 s, one tenant's row
// updated every 0.3 s, and `syncer verify --tenant` run again and again
// beside the exporting daemon, each spending the tenant's refresh token
// too. Before the fix the daemon renewed with the token verify had
// already rotated: the family was revoked and the tenant refused for
// good. Now every grant is made under the tenant's advisory lock with the
// token stored then: no token is used twice, the tenant is never
// refused, and its updates keep arriving.
func TestRotatingRefreshTokenSurvivesVerify(t *testing.T) {
	t.Parallel()
	w := newTenantWorld(t, fakethirdparty.Config{Lookup: true, Tenants: fakethirdparty.TenantConfig{
		RefreshPrefix: "rt-", RefreshFamily: true, TokenLife: 2 * time.Second,
	}})
	w.exec(t, `CREATE TABLE crm_refresh (account_id text PRIMARY KEY, refresh_token text NOT NULL)`)
	w.exec(t, `INSERT INTO crm_refresh VALUES ('acme', 'rt-acme')`)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `destinations:
  crm:
    url: %[1]s/t/{tenant}
    tenants:
      query: SELECT refresh_token FROM crm_refresh WHERE account_id = $1
      on_refresh: UPDATE crm_refresh SET refresh_token = $2 WHERE account_id = $1
    auth: {token_url: "%[1]s/t/{tenant}/oauth/token"}
sources:
  - {table: contacts, key: id, tenant: account, destination: crm, batch_size: 10}
`, w.fakeURL), 0o600))
	out, err := exec.Command(w.bin, "migrate", "--database-url", w.dsn, "--config", cfg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, runErr := w.run(t, w.dsn, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tokens: %+v\nthe daemon's log:\n%s", w.fake.TenantStats().Tokens, runErr.String())
		}
	})
	w.exec(t, `INSERT INTO contacts (id, account) SELECT g, 'acme' FROM generate_series(1, 5) g`)
	waitFor(t, time.Minute, "acme's rows at its account", func() bool { return w.holds("acme", 5, nil) })

	ctx, cancel := context.WithCancel(context.Background())
	writerDone := make(chan error, 1)
	go func() {
		for v := 1; ; v++ {
			if _, err := w.pool.Exec(ctx, `UPDATE contacts SET v = $1 WHERE id = 1 + $1 % 5`, v); err != nil {
				if ctx.Err() != nil {
					err = nil // cancelled mid-statement: the test is done with it
				}
				writerDone <- err
				return
			}
			select {
			case <-ctx.Done():
				writerDone <- nil
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(cancel)

	verified := 0
	for i := range 12 {
		cmd := exec.Command(w.bin, "verify", "--database-url", w.dsn, "--config", cfg, "--source", "contacts", "--tenant", "acme")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			verified++
		case errors.As(err, &exit) && exit.ExitCode() == 3:
			verified++ // drift: rows updated while it read
		default:
			t.Logf("verify %d: %v: %s", i, err, out)
		}
		require.NotContains(t, string(out), "rt-acme", "a refresh token in verify's output")
		time.Sleep(time.Second)
	}
	cancel()
	require.NoError(t, <-writerDone)
	require.Positive(t, verified, "verify read the tenant's account")

	// The daemon renewed its token several times beside the verifies, and
	// no token was ever used twice.
	tokens := w.fake.TenantStats().Tokens["acme"]
	require.Zero(t, tokens.Reuses, "a refresh token used twice")
	require.False(t, tokens.FamilyRevoked)
	require.Greater(t, tokens.Grants, int64(verified), "the daemon's grants and verify's")
	t.Logf("%d of 12 verify runs read acme's account; %d grants, no token used twice", verified, tokens.Grants)

	// Rows keep arriving: an update after the verifies reaches acme.
	before := w.latest("acme")
	w.exec(t, `UPDATE contacts SET v = v + 1000`)
	waitFor(t, time.Minute, "acme's updates after the verifies", func() bool { return w.holds("acme", 5, before) })
	w.waitSourcesDrained(t, "contacts")
	var status []byte
	status, err = exec.Command(w.bin, "status", "--database-url", w.dsn).CombinedOutput()
	require.NoError(t, err, "%s", status)
	require.Contains(t, string(status), " 0 refused", "the tenant is not refused")
	facts, err := breakerstore.ReadTenant(context.Background(), w.pool, "crm", "acme")
	require.NoError(t, err)
	require.False(t, facts.Credentials.Refused, "the tenant's refusal fact: %s", facts.Credentials.Message)
	require.NotContains(t, runErr.String(), "rt-acme", "a refresh token in the daemon's log")
	require.Zero(t, w.fake.TenantStats().Tenants["acme"].RequestsByStatus["401"], "no request without a valid token")
	w.requireTenantsOnceInOrder(t)
}
