package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// Issue 54's leg of a refresh token spent once: the tickets' tenants get
// their access tokens from crm's token endpoint, which rotates the refresh
// token at every grant and revokes the tenant's whole family when a spent
// one is used again; `syncer verify --tenant` spends them too, beside the
// daemons. The soak refuses a tenant only by revoking its connection
// (revokeTenant), and the customer then connects again with a new family.
// Any other refusal is syncer's: a reuse, a family revoked, a grant
// refused outside a revocation, or a tenant syncer records as refused
// long after the soak gave it back (checkTokens).

// refusedGrace is how long after the soak gave a revoked tenant back that
// syncer may still record it refused: the deliverer's next probe of the
// credentials (30 s), the read of the new row and a batch, under faults.
const refusedGrace = 90 * time.Second

// revocations are the soak's revocations of tenants' connections.
type revocations struct {
	mu       sync.Mutex
	open     map[string]int       // revocations under way, by tenant
	restored map[string]time.Time // the end of each tenant's last one
}

// excused reports whether the soak may be why tenant is refused at now.
func (v *revocations) excused(tenant string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.open[tenant] > 0 || now.Sub(v.restored[tenant]) < refusedGrace
}

// begin opens a revocation of tenant, unless one is open: false then.
func (v *revocations) begin(tenant string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.open == nil {
		v.open, v.restored = map[string]int{}, map[string]time.Time{}
	}
	if v.open[tenant] > 0 {
		return false
	}
	v.open[tenant]++
	return true
}

func (v *revocations) end(tenant string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.open[tenant]--
	v.restored[tenant] = time.Now()
}

// reconnect revokes tenant's connection and has the customer connect
// again (revokeTenant) in the background, and returns a channel closed
// when that is over; nil, and nothing done, while the tenant's last
// revocation is still under way. Two at once would cross: each starts a
// new family at the endpoint and then writes its first token to the row,
// and a write can wait long after its family was started (the
// connections table locked for 40 s, seed 439617995), so the older
// family's token could be written last: a token the fake no longer knows,
// every grant of the tenant refused for good, and syncer blamed. That is
// the application's race, not syncer's: the fake's new family ends the
// old one, where a real provider's new authorization leaves the older
// one's refresh token valid until revoked, so whichever token a real
// application stored last would still be granted. And a customer does not
// disconnect an account that is not connected.
func (r *run) reconnect(ctx context.Context, tenant, token string) <-chan struct{} {
	if !r.revs.begin(tenant) {
		fmt.Fprintf(r.cfg.Progress, "soak: %7s tenant %s not revoked: its last revocation is still under way\n", r.since(), tenant)
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.revs.end(tenant)
		r.revokeTenant(ctx, tenant, token)
	}()
	return done
}

// revokeTenant revokes tenant's connection at crm (its access token and
// its grants refused) for 5 s; then the customer connects again: a new
// family of refresh tokens at the endpoint, its first token written to the
// tenant's row by the application under syncer's refresh lock of the
// tenant (tenants.RefreshLock, as docs/design.md advises), and the access
// given back with token. One at a time per tenant (reconnect).
func (r *run) revokeTenant(ctx context.Context, tenant, token string) {
	r.crm.fake.RevokeTenant(tenant)
	fmt.Fprintf(r.cfg.Progress, "soak: %7s tenant %s's connection revoked\n", r.since(), tenant)
	sleep(ctx, 5*time.Second)
	defer r.crm.fake.RestoreTenant(tenant, token)
	first := ""
	class, key := tenants.RefreshLock(ticketDestination, tenant)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); sleep(ctx, 500*time.Millisecond) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pgx.BeginFunc(wctx, r.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(wctx, `SELECT pg_advisory_xact_lock($1, $2)`, class, key); err != nil {
				return err
			}
			if first == "" {
				first = r.crm.fake.NewRefreshFamily(tenant)
				fmt.Fprintf(r.cfg.Progress, "soak: %7s tenant %s connected again: a new family at the token endpoint (%s)\n", r.since(), tenant, familyName(first))
			}
			_, err := tx.Exec(wctx, `UPDATE ticket_connections SET refresh_token = $2 WHERE tenant = $1`, tenant, first)
			return err
		})
		cancel()
		if err == nil {
			fmt.Fprintf(r.cfg.Progress, "soak: %7s tenant %s's new refresh token stored (%s)\n", r.since(), tenant, familyName(first))
			return
		}
	}
	r.cfg.Logger.WarnContext(ctx, "soak: a reconnected tenant's refresh token was not stored within a minute", slog.String("tenant", tenant))
}

// familyName names the family a first refresh token starts, for the
// progress lines: the fake's tokens are the soak's own, not secrets, but
// the family is what tells one reconnection from another.
func familyName(first string) string {
	if _, f, ok := strings.Cut(first, "~"); ok {
		return "family " + f
	}
	return "family 0"
}

// tenantVerifies runs `syncer verify --source tickets --tenant T` every
// 7 s, a tenant after another, beside the daemons' export: it reads the
// tenant's account with the tenant's credentials, spending its refresh
// token under the same lock as the daemons. Drift (exit 3) is fine while
// rows move, and a tenant revoked or unconnected makes it exit 1 or 2;
// what it must never do is get a tenant refused (checkTokens). With the
// pooler leg, every other one goes through the pooler.
func (r *run) tenantVerifies(ctx context.Context) {
	codes := map[int]int{}
	defer func() {
		r.rep.mu.Lock()
		r.rep.Verifies = codes
		r.rep.mu.Unlock()
	}()
	env := daemonEnv(r.dbURL, r.live.url(), r.configPath, "127.0.0.1:0")
	for i := 0; ; i++ {
		// With the pooler leg, every other one through the pooler, as
		// the pooled daemon is.
		env := env
		if r.pooler != nil && i%2 == 1 {
			env = r.pooledEnv("127.0.0.1:0")
		}
		if sleep(ctx, 7*time.Second); ctx.Err() != nil {
			return
		}
		vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		cmd := exec.CommandContext(vctx, r.cfg.Binary, "verify", "--source", sourceTickets, "--tenant", tenantName(i%ticketTenants))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		codes[code]++
		if code != 0 && code != 3 && codes[code] <= 3 {
			r.cfg.Logger.WarnContext(ctx, "soak: verify exited", slog.Int("status", code), slog.String("output", lastLine(out)))
		}
	}
}

// lastLine is the last line of a command's output, for a log.
func lastLine(out []byte) string {
	s := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// checkTokens is the check of contract 10.1's "a tenant is never refused
// because syncer itself spent its rotated token": at crm's token endpoint,
// a reuse, a family revoked or a grant refused while the soak had not
// revoked the tenant is syncer's doing (the soak never spends a token, and
// its reconnections start new families); and a tenant syncer records as
// refused, refusedGrace after the soak last gave it back, is one the soak
// did not refuse. seen holds the counts already reported, refused the
// tenants reported refused until they are not.
func (r *run) checkTokens(ctx context.Context, seen map[string]int64, refused map[string]bool) {
	for tenant, st := range r.crm.fake.TenantStats().Tokens {
		var revokedFamily int64
		if st.FamilyRevoked {
			revokedFamily = 1
		}
		for what, n := range map[string]int64{
			"refresh tokens used again after their rotation":           st.Reuses,
			"grants refused while the soak had not revoked the tenant": st.Refused - st.RefusedRevoked,
			"families of refresh tokens revoked at the token endpoint": revokedFamily,
		} {
			k := "tenant " + tenant + ": " + what
			if n > seen[k] {
				r.rep.violate(r.since(), fmt.Sprintf("%s: %d (was %d)", k, n, seen[k]))
				seen[k] = n
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	facts, err := breakerstore.ReadTenants(ctx, r.pool, ticketDestination)
	if err != nil {
		return // a fault; the next look reads them
	}
	now := time.Now()
	for tenant := range refused {
		if f := facts[tenant]; f == nil || !f.Credentials.Refused {
			delete(refused, tenant)
		}
	}
	for tenant, f := range facts {
		if !f.Credentials.Refused || refused[tenant] || r.revs.excused(tenant, now) {
			continue
		}
		refused[tenant] = true
		r.rep.violate(r.since(), fmt.Sprintf("tenant %s: refused by syncer (%s) and the soak did not revoke it (none open, none ended in the last %s)",
			tenant, f.Credentials.Message, refusedGrace))
	}
}

// tokenReport is the line of the report on desk's token endpoint.
func (r *run) tokenReport() string {
	var grants, refused, revoked, reuses int64
	for _, st := range r.crm.fake.TenantStats().Tokens {
		grants += st.Grants
		refused += st.Refused
		revoked += st.RefusedRevoked
		reuses += st.Reuses
	}
	return fmt.Sprintf("%d grants, %d refused while the soak had the tenant revoked, %d refused otherwise, %d reuses", grants, revoked, refused-revoked, reuses)
}

// verifyReport is the line of the report on the verify runs.
func verifyReport(codes map[int]int) string {
	keys := make([]int, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("exit %d ×%d", k, codes[k]))
	}
	return strings.Join(parts, ", ")
}
