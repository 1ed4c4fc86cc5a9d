package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/console"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Secrets the tenants' rows and connection rows carry (contract section
// 10, "Secrets"): none may show anywhere syncer writes or serves.
var tenantSecrets = []string{"sk_live_tok_", "sk_wrong_globex", "pw-hunter2-secret", "rt-refresh-secret-77"}

// Issue 43, in a real browser and on every surface: a source with a tenant
// column whose tenants are ok (acme), refused (globex: a wrong token) and
// unconnected (initech: no connection row). The console's tenants view
// counts them by state and lists them by pending rows, finds one by its
// value, pauses, resumes and probes one; status (text and JSON), every
// console page, /metrics and the daemon's log hold none of the tokens,
// passwords and refresh tokens the rows and connection rows carry.
func TestConsoleTenantsInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{Format: fakethirdparty.FormatCustom, Tenants: fakethirdparty.TenantConfig{TokenPrefix: "sk_live_tok_"}})
	s := &consoleSetup{bundle: b, dest: dest, logs: &dbtest.Buffer{}}
	b.exec(t, `CREATE TABLE crm_connections (account_id text PRIMARY KEY, token text NOT NULL, password text, refresh_token text);
		INSERT INTO crm_connections VALUES ('acme', 'sk_live_tok_acme', 'pw-hunter2-secret', 'rt-refresh-secret-77'),
			('globex', 'sk_wrong_globex', 'pw-hunter2-secret', 'rt-refresh-secret-77')`)
	b.exec(t, `CREATE TABLE contacts (id bigint PRIMARY KEY, account_id text NOT NULL, email text, password text, refresh_token text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s/t/{tenant}
    format: custom
    tenants:
      query: SELECT token FROM crm_connections WHERE account_id = $1
    request:
      path: /crm/v3/objects/contacts/batch/upsert
      body: '{inputs: [.items[] | {id, version, properties: .payload}]}'
sources:
  - {table: contacts, key: id, tenant: account_id, destination: crm, snapshot: false}
`, dest.url), nil)
	b.installSources(t, cfg)
	s.base = s.startDaemon(t, cfg, consoleToken, func(c *console.Config) { c.Refresh = time.Hour })
	b.exec(t, `INSERT INTO contacts SELECT i, (ARRAY['acme','acme','acme','globex','globex','initech'])[i], 'c' || i || '@example.com',
		'pw-hunter2-secret', 'rt-refresh-secret-77' FROM generate_series(1, 6) i`)
	waitFor(t, 60*time.Second, "acme drained, globex refused, initech unconnected", func() bool {
		r := b.report(t)
		for _, src := range r.Sources {
			if src.Name == "contacts" && src.Tenants != nil {
				c := src.Tenants.Counts
				return c["refused"] == 1 && c["unconnected"] == 1 && src.Pending == 3
			}
		}
		return false
	})
	require.Equal(t, int64(3), dest.fake.TenantStats().Tenants["acme"].ItemsAccepted)

	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/sources/contacts"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), consoleToken),
		chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#tenants-link`)),
		chromedp.Click(chromedp.CSS(`#tenants-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#tenant-states`)),
	))
	require.Equal(t, "1", textOf(t, ctx, `#count-refused`))
	require.Equal(t, "1", textOf(t, ctx, `#count-unconnected`))
	require.Equal(t, "1", textOf(t, ctx, `#unconnected-pending`))
	list := textOf(t, ctx, `#tenants`)
	require.Contains(t, list, "globex")
	require.Contains(t, list, "initech")
	require.Less(t, strings.Index(list, "globex"), strings.Index(list, "initech"), "most pending first")
	shot(t, ctx, "tenants")

	// Find one by its value, pause it, resume it, probe it.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#tenant-search`), "acme"),
		chromedp.Click(chromedp.CSS(`#find`)),
		chromedp.WaitReady(chromedp.CSS(`#tenants input[name=tenant][value="acme"]`)),
	))
	require.Contains(t, textOf(t, ctx, `#tenants`), "acme")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`button[name=pause-tenant]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[name=resume-tenant]`)),
	))
	require.Contains(t, textOf(t, ctx, `#tenants`), "paused")
	b.exec(t, `INSERT INTO contacts VALUES (7, 'acme', 'c7@example.com', 'pw-hunter2-secret', 'rt-refresh-secret-77')`)
	time.Sleep(2 * time.Second)
	require.Equal(t, int64(3), dest.fake.TenantStats().Tenants["acme"].ItemsAccepted, "a paused tenant's rows wait")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`button[name=resume-tenant]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[name=pause-tenant]`)),
	))
	waitFor(t, 60*time.Second, "acme's row after the resume", func() bool { return dest.fake.TenantStats().Tenants["acme"].ItemsAccepted == 4 })
	b.exec(t, `UPDATE crm_connections SET token = 'sk_live_tok_globex' WHERE account_id = 'globex'`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/sources/contacts/tenants?tenant=globex"),
		chromedp.WaitVisible(chromedp.CSS(`button[name=probe-tenant]`)),
		chromedp.Click(chromedp.CSS(`button[name=probe-tenant]`)),
		chromedp.WaitVisible(chromedp.CSS(`#tenant-states`)),
	))
	waitFor(t, 60*time.Second, "globex's rows once its token is fixed", func() bool { return dest.fake.TenantStats().Tenants["globex"].ItemsAccepted == 2 })

	// The secret grep.
	surfaces := map[string]string{
		"status":      b.syncer(t, "status"),
		"status json": b.syncer(t, "status", "--json"),
		"status one":  b.syncer(t, "status", "--json", "--source", "contacts", "--tenant", "globex"),
		"log":         s.logs.String(),
		"metrics":     metricsText(t, strings.TrimPrefix(s.base, "http://")),
	}
	require.Contains(t, surfaces["metrics"], `syncer_tenants{destination="crm",source="contacts",state="unconnected"} 1`)
	require.Contains(t, surfaces["status"], "tenants of contacts")
	bearer := http.Header{"Authorization": {"Bearer " + consoleToken}}
	for _, page := range []string{"/console", "/console/sources/contacts", "/console/sources/contacts/tenants",
		"/console/sources/contacts/tenants?state=unconnected", "/console/sources/contacts/tenants?tenant=globex", "/console/destinations/crm"} {
		code, body := get(t, http.DefaultClient, s.base+page, bearer)
		require.Equal(t, http.StatusOK, code, page)
		surfaces["console "+page] = body
	}
	for name, text := range surfaces {
		for _, secret := range tenantSecrets {
			require.NotContains(t, text, secret, "%s shows a secret", name)
		}
	}
}
