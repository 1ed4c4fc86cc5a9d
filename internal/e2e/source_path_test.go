package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 45: one custom destination (one token, one limit) serves two
// objects of one API, `{source}` in its paths naming each batch's source:
// the receiver sees every upsert under its own object's path and every
// per-item delete under its object and key, escaped.
func TestCustomPathPerSource(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	var mu sync.Mutex
	paths := map[string]int{}
	recv := newRecvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.Method+" "+r.URL.EscapedPath()]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	b.exec(t, `CREATE TABLE contacts (id text PRIMARY KEY, email text)`)
	b.exec(t, `CREATE TABLE companies (id bigint PRIMARY KEY, domain text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s/crm/v3/objects
    format: custom
    request:
      path: /{source}/batch/upsert
      body: '{inputs: [.items[] | {id, properties: .payload}]}'
    deletes:
      method: DELETE
      path: /{source}/{id}
      per_item: true
sources:
  - {table: contacts, key: id, destination: crm}
  - {table: companies, key: id, destination: crm}
`, recv), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.ThirdParty.URL = ""; c.Sources = cfg })
	b.exec(t, `INSERT INTO contacts VALUES ('a/b c', 'a@example.com'), ('7', 'b@example.com')`)
	b.exec(t, `INSERT INTO companies VALUES (1, 'example.com')`)
	b.waitSourcesDrained(t, "contacts", "companies")
	b.exec(t, `DELETE FROM contacts WHERE id = 'a/b c'`)
	b.exec(t, `DELETE FROM companies WHERE id = 1`)
	waitFor(t, 30*time.Second, "both deletes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return paths["DELETE /crm/v3/objects/contacts/a%2Fb%20c"] == 1 && paths["DELETE /crm/v3/objects/companies/1"] == 1
	})
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, paths["POST /crm/v3/objects/contacts/batch/upsert"], "%v", paths)
	require.Positive(t, paths["POST /crm/v3/objects/companies/batch/upsert"], "%v", paths)
	for p := range paths {
		require.NotContains(t, p, "{source}", "every path expanded")
	}
}
