package soak

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaSQL makes the application's tables the sources export: orders
// (an integer key), accounts (a text key) and line_items (a composite key
// of text and bigint), each with a soft-delete column, as Rails' and
// Django's soft-delete packages add; line_items' source exports only the
// rows not soft-deleted (a row filter), so a soft delete is a tombstone.
const schemaSQL = `
CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL, total numeric NOT NULL, deleted_at timestamptz);
CREATE TABLE IF NOT EXISTS accounts (id text PRIMARY KEY, name text NOT NULL, n int NOT NULL, deleted_at timestamptz);
CREATE TABLE IF NOT EXISTS line_items (tenant text NOT NULL, id bigint NOT NULL, qty int NOT NULL, deleted_at timestamptz,
  PRIMARY KEY (tenant, id));`

// The destinations of the sources: crm speaks syncer's protocol, search
// Elasticsearch's bulk API (answered per item, so an item can stay 503
// while its neighbours are accepted), hub a HubSpot-like custom API whose
// response program iterates over a count the third party answers, hooks
// Standard Webhooks (a request a row, so a row can stay 404 while the
// rows of its batch are accepted).
const (
	sourceOrders   = "orders"
	sourceAccounts = "accounts"
	sourceLines    = "line_items"
	sourceSearch   = "accounts-search" // accounts again, to search
	sourceHub      = "orders-hub"      // orders again, to hub
	sourceHooks    = "accounts-hooks"  // accounts a third time, to hooks
)

// hooksSecret signs hooks' requests, and its fake verifies them. Not a
// secret: the soak's own receiver.
const hooksSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// soakSources are the sources the configuration names, for the checks.
var soakSources = []string{sourceOrders, sourceAccounts, sourceLines, sourceSearch, sourceHub, sourceHooks, sourceTickets}

// hubAccepted is hub's response.accepted: it iterates over the answer's
// "n", which the third party sets (fakethirdparty.Config.AnswerLoad), as a
// program that walks what an API returns does.
const hubAccepted = `.status == 204 or (.body.status == "COMPLETE" and ([last(range(.body.n // 0))] | length) >= 0)`

// hubRequest is hub's request program, and hubBroken the one the
// broken-program fault puts in its place: it fails on every row.
const (
	hubRequest = `{inputs: [.items[] | {id, version, properties: .payload}]}`
	hubBroken  = `error("soak: the request program is broken")`
)

// configState is what the faults change in the configuration file.
type configState struct {
	crmInFlight int  // a reload under load flips it between 4 and 3
	hubBroken   bool // the broken-program fault
}

// configYAML is the soak's SYNCER_CONFIG: resources goes to the default
// destination (SYNCER_THIRDPARTY_URL), the three sources to crm, accounts
// again to search and to hooks, orders again to hub.
func configYAML(crmURL, searchURL, hubURL, hooksURL string, st configState) string {
	request := hubRequest
	if st.hubBroken {
		request = hubBroken
	}
	dest, source := ticketsYAML(crmURL)
	return fmt.Sprintf(`destinations:
%s  crm:
    url: %s
    max_in_flight: %d
  search:
    url: %s/accounts
    format: elasticsearch
    max_in_flight: 4
  hub:
    url: %s
    format: custom
    max_in_flight: 2
    request:
      path: /crm/v3/objects/orders/batch/upsert
      body: '%s'
    deletes:
      path: /crm/v3/objects/orders/batch/archive
      body: '{inputs: [.items[] | {id, version}]}'
    response:
      accepted: '%s'
      rejected: '[.body.errors[]? | {id: .context.ids[0], error: .message}]'
  hooks:
    url: %s/hooks
    format: standard-webhooks
    signing_secret_env: SOAK_HOOKS_SECRET
    max_in_flight: 8
sources:
  - {table: orders, key: id, destination: crm, batch_size: 100}
  - {table: accounts, key: id, destination: crm, batch_size: 100}
  - {table: line_items, key: [tenant, id], where: "deleted_at IS NULL", destination: crm, batch_size: 100}
  - {name: %s, table: accounts, key: id, destination: search, batch_size: 100}
  - {name: %s, table: orders, key: id, destination: hub, batch_size: 100}
  - {name: %s, table: accounts, key: id, destination: hooks, batch_size: 20}
%s`, dest, crmURL, cmp.Or(st.crmInFlight, 4), searchURL, hubURL, request, hubAccepted, hooksURL, sourceSearch, sourceHub, sourceHooks, source)
}

// writers are the application: inserts, updates, deletes and soft deletes
// (and undeletes) of resources, orders and accounts, at rate statements a
// second, from seed. A statement a fault breaks is counted and dropped,
// as an application's would be.
type writers struct {
	pool   *pgxpool.Pool
	rate   float64
	seed   uint64
	keys   int64 // the key space of the sources: updates and deletes hit rows that exist
	ok     atomic.Int64
	failed atomic.Int64
}

func (w *writers) run(ctx context.Context, n int) {
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			w.loop(ctx, rand.New(rand.NewPCG(w.seed, uint64(i)+1)), w.rate/float64(n))
		}()
	}
	for range n {
		<-done
	}
}

func (w *writers) loop(ctx context.Context, rng *rand.Rand, rate float64) {
	every := time.Duration(float64(time.Second) / rate)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sql, args := w.statement(rng)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := w.pool.Exec(sctx, sql, args...)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.failed.Add(1)
			continue
		}
		w.ok.Add(1)
	}
}

// statement draws one write.
func (w *writers) statement(rng *rand.Rand) (string, []any) {
	op := rng.IntN(100)
	switch rng.IntN(4) {
	case 0: // resources: its ids are the database's, so writes pick among the last ones
		pick := `(SELECT id FROM resources ORDER BY id DESC OFFSET $1 LIMIT 1)`
		off := rng.IntN(200)
		switch {
		case op < 45:
			return `INSERT INTO resources (payload) VALUES (jsonb_build_object('n', $1::int))`, []any{rng.IntN(1 << 30)}
		case op < 80:
			return `UPDATE resources SET payload = jsonb_build_object('n', $2::int) WHERE id = ` + pick, []any{off, rng.IntN(1 << 30)}
		case op < 90:
			return `UPDATE resources SET payload = payload || jsonb_build_object('deleted_at', now()) WHERE id = ` + pick, []any{off}
		default:
			return `DELETE FROM resources WHERE id = ` + pick, []any{off}
		}
	case 1:
		id := rng.Int64N(w.keys) + 1
		switch {
		case op < 50:
			return `INSERT INTO orders (id, status, total) VALUES ($1, 'new', $2) ON CONFLICT (id) DO UPDATE
				SET total = excluded.total, status = 'changed'`, []any{id, rng.IntN(100000)}
		case op < 75:
			return `UPDATE orders SET total = total + 1 WHERE id = $1`, []any{id}
		case op < 85:
			return `UPDATE orders SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL`, []any{id}
		case op < 90:
			return `UPDATE orders SET deleted_at = NULL WHERE id = $1 AND deleted_at IS NOT NULL`, []any{id}
		default:
			return `DELETE FROM orders WHERE id = $1`, []any{id}
		}
	case 3:
		tenant, id := fmt.Sprintf("t,%d", rng.IntN(3)), rng.Int64N(w.keys/3)+1
		switch {
		case op < 45:
			return `INSERT INTO line_items (tenant, id, qty) VALUES ($1, $2, 1) ON CONFLICT (tenant, id) DO UPDATE
				SET qty = line_items.qty + 1`, []any{tenant, id}
		case op < 65:
			return `UPDATE line_items SET qty = qty + 1 WHERE tenant = $1 AND id = $2`, []any{tenant, id}
		case op < 80:
			return `UPDATE line_items SET deleted_at = now() WHERE tenant = $1 AND id = $2 AND deleted_at IS NULL`, []any{tenant, id}
		case op < 90:
			return `UPDATE line_items SET deleted_at = NULL WHERE tenant = $1 AND id = $2 AND deleted_at IS NOT NULL`, []any{tenant, id}
		default:
			return `DELETE FROM line_items WHERE tenant = $1 AND id = $2`, []any{tenant, id}
		}
	default:
		id := fmt.Sprintf("acct-%d", rng.Int64N(w.keys))
		switch {
		case op < 50:
			return `INSERT INTO accounts (id, name, n) VALUES ($1, $2, 0) ON CONFLICT (id) DO UPDATE
				SET n = accounts.n + 1`, []any{id, fmt.Sprintf("name %d", rng.IntN(1000))}
		case op < 75:
			return `UPDATE accounts SET name = $2 WHERE id = $1`, []any{id, fmt.Sprintf("renamed %d", rng.IntN(1000))}
		case op < 88:
			return `UPDATE accounts SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL`, []any{id}
		default:
			return `DELETE FROM accounts WHERE id = $1`, []any{id}
		}
	}
}
