package soak

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// The tenant source (issue 43): tickets, whose tenant column sends each
// row to its tenant's own account at crm's fake (/t/{tenant}/), with the
// access token crm's rotating token endpoint gives for the refresh token
// its connection row holds (issue 54: 8 s access tokens, a new refresh
// token at each grant, stored by on_refresh, and the whole family revoked
// when a spent one is used again, as Auth0 and Okta do). Beside the
// schedule's faults (which hit the tenants' requests as crm's), the
// tenants' writer moves rows between tenants, revokes a tenant's
// connection now and then (the customer then connects again: a new
// family, stored by the application), connects the last tenant only
// halfway through (its rows wait until then), and deletes a tenant two
// thirds through (its rows, then its connection row); `syncer verify
// --tenant` runs beside the export (tokens.go). The checks: every tenant
// account's counters of broken promises, no tenant refused that the soak
// did not refuse (tokens.go), and at the end each row live at its current
// tenant's account only (a tombstone last wherever it was before).

const (
	sourceTickets = "tickets"
	// ticketTenants tenants, k0..k(n-1); the last one is unconnected
	// until halfway through the run.
	ticketTenants = 5
	// ticketTokenPrefix is what crm's tenant accounts take as a token:
	// tok-<tenant>, or the new token the revoke gave them.
	ticketTokenPrefix = "tok-"
	// ticketRefreshPrefix is the first refresh token of a tenant at crm's
	// token endpoint: rt-<tenant>, then rt-<tenant>.N, and rt-<tenant>~F
	// for the F-th family a reconnection started.
	ticketRefreshPrefix = "rt-"
	// ticketTokenLife is the life of the endpoint's access tokens: short,
	// so that the daemons rotate each tenant's refresh token every few
	// seconds, under the faults.
	ticketTokenLife = 8 * time.Second
	// ticketDestination is the tickets' destination.
	ticketDestination = "desk"
	// ticketDeleted is the tenant deleted two thirds into the run (issue
	// 54): its rows, then its connection row.
	ticketDeleted = 3
)

const ticketsSQL = `
CREATE TABLE IF NOT EXISTS tickets (id text PRIMARY KEY, tenant text NOT NULL, n int NOT NULL);
CREATE TABLE IF NOT EXISTS ticket_connections (tenant text PRIMARY KEY, refresh_token text NOT NULL);
INSERT INTO ticket_connections SELECT 'k' || i, 'rt-k' || i FROM generate_series(0, 3) i ON CONFLICT DO NOTHING;`

// ticketsYAML adds the desk destination and the tickets source to a
// configuration's text (its "sources:" line).
func ticketsYAML(crmURL string) (dest, source string) {
	return fmt.Sprintf(`  %s:
    url: %s/t/{tenant}
    max_in_flight: 2
    auth:
      token_url: %s/t/{tenant}/oauth/token
    tenants:
      query: SELECT refresh_token FROM ticket_connections WHERE tenant = $1
      on_refresh: UPDATE ticket_connections SET refresh_token = $2 WHERE tenant = $1
`, ticketDestination, crmURL, crmURL), fmt.Sprintf("  - {table: %s, key: id, tenant: tenant, lanes: 4, destination: desk, batch_size: 20}\n", sourceTickets)
}

// setupTenants makes crm's tenant accounts take their own tokens, which
// a rotating token endpoint gives that revokes a tenant's whole family of
// refresh tokens when one is used twice, and answer lookups (verify).
func (r *run) setupTenants() {
	r.crm.mu.Lock()
	r.crm.cfg.Tenants.TokenPrefix = ticketTokenPrefix
	r.crm.cfg.Tenants.RefreshPrefix = ticketRefreshPrefix
	r.crm.cfg.Tenants.RefreshFamily = true
	r.crm.cfg.Tenants.TokenLife = ticketTokenLife
	r.crm.cfg.Lookup = true
	cfg := r.crm.cfg
	r.crm.mu.Unlock()
	r.crm.fake.SetConfig(cfg)
}

// tenantWrites writes tickets until ctx ends: inserts, updates, moves and
// deletes a few a second; a revoke every 15 s, the customer connected
// again 5 s later; the last tenant connected halfway through.
func (r *run) tenantWrites(ctx context.Context, half time.Duration) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x7e7a))
	keys := max(r.cfg.Keys/10, 50)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	connect := time.After(half)
	remove := time.After(half + half/3)
	revoke := time.NewTicker(15 * time.Second)
	defer revoke.Stop()
	renewed := 0
	gone := "" // the tenant deleted, once it is
	// pick draws one of the first n tenants still there, from the seed's
	// stream, so a seed's writes replay.
	pick := func(n int) string {
		t := tenantName(rng.IntN(n))
		if t == gone {
			t = tenantName((rng.IntN(n-1) + ticketDeleted + 1) % n)
		}
		return t
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-connect:
			r.tenantMust(ctx, `INSERT INTO ticket_connections VALUES ($1, $2) ON CONFLICT DO NOTHING`, tenantName(ticketTenants-1), ticketRefreshPrefix+tenantName(ticketTenants-1))
		case <-remove:
			// A customer leaves: its rows deleted, then, once their
			// tombstones went, its connection row.
			gone = tenantName(ticketDeleted)
			r.tenantMust(ctx, `DELETE FROM tickets WHERE tenant = $1`, gone)
			fmt.Fprintf(r.cfg.Progress, "soak: %7s tenant %s deleted\n", r.since(), gone)
			go r.disconnectWhenSent(context.WithoutCancel(ctx), gone)
		case <-revoke.C:
			tenant := pick(ticketTenants - 1)
			renewed++
			token := fmt.Sprintf("%s%s-%d", ticketTokenPrefix, tenant, renewed)
			r.reconnect(context.WithoutCancel(ctx), tenant, token)
		case <-tick.C:
			id := "tk-" + strconv.FormatInt(rng.Int64N(keys), 10)
			tenant := pick(ticketTenants)
			switch op := rng.IntN(100); {
			case op < 50:
				r.tenantExec(ctx, `INSERT INTO tickets (id, tenant, n) VALUES ($1, $2, 0) ON CONFLICT (id) DO UPDATE SET n = tickets.n + 1`, id, tenant)
			case op < 80: // a move, when the tenant differs
				r.tenantExec(ctx, `UPDATE tickets SET tenant = $2, n = n + 1 WHERE id = $1`, id, tenant)
			default:
				r.tenantExec(ctx, `DELETE FROM tickets WHERE id = $1`, id)
			}
		}
	}
}

func tenantName(i int) string { return "k" + strconv.Itoa(i) }

// disconnectWhenSent deletes a tenant's connection row once none of its
// changes is pending, as an application does once the customer's data is
// gone at the third party: deleted earlier, its tombstones would wait for
// a connection for good (the contract's unconnected tenant).
func (r *run) disconnectWhenSent(ctx context.Context, tenant string) {
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); sleep(ctx, time.Second) {
		var n int64
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.pool.QueryRow(qctx, `SELECT count(*) FROM syncer_changes WHERE source = $1 AND tenant = $2`, sourceTickets, tenant).Scan(&n)
		cancel()
		if err == nil && n == 0 {
			r.tenantMust(ctx, `DELETE FROM ticket_connections WHERE tenant = $1`, tenant)
			fmt.Fprintf(r.cfg.Progress, "soak: %7s tenant %s's connection row deleted, its tombstones sent\n", r.since(), tenant)
			return
		}
	}
	r.cfg.Logger.WarnContext(ctx, "soak: a deleted tenant's tombstones were pending for 5 minutes", slog.String("tenant", tenant))
}

// tenantExec runs a write as the application does: a failure (a fault
// ended its session) is dropped.
func (r *run) tenantExec(ctx context.Context, sql string, args ...any) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = r.pool.Exec(ctx, sql, args...)
}

// tenantMust runs a write the application would not give up on (a
// tenant connected, a new token stored) until it commits: a fault that
// ended its session (a restart of the server) must not leave a tenant
// unconnected for good, which the checks would take for syncer's doing
// (seed 16: the last tenant's connection was written while the server
// restarted, and its rows never went).
func (r *run) tenantMust(ctx context.Context, sql string, args ...any) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := r.pool.Exec(wctx, sql, args...)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		sleep(ctx, 500*time.Millisecond)
	}
	r.cfg.Logger.WarnContext(ctx, "soak: a tenant's write did not commit within a minute", slog.String("sql", sql))
}

// tenantStats is the sum over crm's tenant accounts.
func (r *run) tenantStats() fakethirdparty.Stats { return r.crm.fake.TenantStats().Total }

// compareTenants lists every ticket whose last word is wrong: a row not
// live at its tenant's account with its payload, or live at another's.
func (r *run) compareTenants(ctx context.Context) []string {
	rows, err := r.pool.Query(ctx, `SELECT id, tenant, to_jsonb(t) FROM tickets t`)
	if err != nil {
		return []string{fmt.Sprintf("tickets: read: %v", err)}
	}
	type row struct {
		tenant  string
		payload []byte
	}
	db := map[string]row{}
	for rows.Next() {
		var id string
		var rw row
		if err := rows.Scan(&id, &rw.tenant, &rw.payload); err != nil {
			rows.Close()
			return []string{fmt.Sprintf("tickets: read: %v", err)}
		}
		db[id] = rw
	}
	rows.Close()
	var out []string
	add := func(s string) {
		if len(out) < 5 {
			out = append(out, s)
		}
	}
	seen := map[string]bool{}
	for i := range ticketTenants {
		tenant := tenantName(i)
		words := map[string]fakethirdparty.Delivery{}
		for _, d := range r.crm.fake.TenantDeliveries(tenant) {
			if l, ok := words[d.Text]; !ok || d.Version > l.Version {
				words[d.Text] = d
			}
		}
		for id, l := range words {
			rw, live := db[id]
			switch {
			case live && rw.tenant == tenant:
				seen[id] = true
				if l.Deleted {
					add(fmt.Sprintf("tickets id %s: a tombstone is the last word at its tenant %s", id, tenant))
				} else if p := r.crm.payload(id, l.Version); !sameJSON(p, rw.payload) {
					add(fmt.Sprintf("tickets id %s: the payload that arrived last at %s is not the row's", id, tenant))
				}
			case !l.Deleted:
				add(fmt.Sprintf("tickets id %s: live at %s, and the row is at %q (gone: %v)", id, tenant, rw.tenant, !live))
			}
		}
	}
	for id, rw := range db {
		if !seen[id] {
			add(fmt.Sprintf("tickets id %s: never arrived at its tenant %s", id, rw.tenant))
		}
	}
	return out
}

// payload is what was sent for (id, version), nil if nothing was.
func (a *api) payload(id string, version int64) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.payloads[id][version]
}
