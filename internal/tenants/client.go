package tenants

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Client returns a client of tenant's account as its deliverer would send
// to it, read afresh from its connection row: its URL, headers and
// credentials (or the destination's, without a tenants block). It is for
// a reader of the account (`syncer verify --tenant`), outside the
// registry's deliverers: nothing of it is kept. The error is ErrUnconnected
// without a row, or what is wrong with the row; it never holds a secret.
// A refresh token is spent as a deliverer's is, under the tenant's refresh
// lock with the token stored then, and a rotated one stored by on_refresh;
// in the daemon, a reader shares the tenant's deliverer's grant. A
// Config.Reader registry never spends one without on_refresh
// (ErrRefreshNotShared).
func (r *Registry) Client(ctx context.Context, tenant string) (*thirdparty.Client, error) {
	client, _, err := r.Account(ctx, tenant)
	return client, err
}

// Account is Client with the extra columns of the tenant's connection row
// (nil without a tenants block), which a reader's programs see as
// $tenant.<column>, as the tenant's deliverer's do.
func (r *Registry) Account(ctx context.Context, tenant string) (*thirdparty.Client, map[string]any, error) {
	if tenant == "" {
		return nil, nil, errNoTenant
	}
	var conn *connection
	if s := r.cfg.Settings; s != nil {
		if reason := Invalid(tenant); reason != "" {
			return nil, nil, fmt.Errorf("destination %s: tenant %q: %w: %s", r.cfg.Destination, tenant, ErrInvalid, reason)
		}
		if err := r.cfg.Queries.wait(ctx, r.timeout()); err != nil {
			return nil, nil, fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, tenant, err)
		}
		c, err := r.read(ctx, tenant)
		r.cfg.Queries.release()
		if err != nil {
			return nil, nil, fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, tenant, err)
		}
		if c == nil {
			return nil, nil, fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, tenant, ErrUnconnected)
		}
		conn = c
	}
	mem, shared := r.tokensOf(tenant, conn)
	tcfg, grant, err := r.clientConfig(tenant, conn, mem)
	if err != nil {
		return nil, nil, fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, tenant, err)
	}
	switch {
	case grant != nil && shared != nil:
		// The exporting deliverer's own grant: its access token, no
		// grant more.
		tcfg.Auth = shared
	case grant != nil && r.cfg.Reader && r.cfg.Settings.OnRefresh == "":
		return nil, nil, fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, tenant, ErrRefreshNotShared)
	}
	client, err := thirdparty.New(tcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, tenant, err)
	}
	var extra map[string]any
	if conn != nil {
		extra = conn.extra
	}
	return client, extra, nil
}

// ErrRefreshNotShared is a reader's answer (Config.Reader) for a tenant
// whose credentials are a refresh token when the destination has no
// on_refresh: an exporting daemon may hold the token the endpoint rotated
// it to, and spending the stored one would get the tenant refused.
var ErrRefreshNotShared = errors.New("its credentials are a refresh token and the destination has no tenants.on_refresh: a reader outside the daemon does not spend it, since the exporting daemon may hold the token it was rotated to and a token endpoint that rotates refresh tokens would then refuse the tenant (set tenants.on_refresh, or let the daemon verify it: verify_every)")

// tokensOf is what this process knows of tenant's refresh tokens (its
// entry's, when a deliverer of it was built here), and the deliverer's
// grant when it was built from a row like conn.
func (r *Registry) tokensOf(tenant string, conn *connection) (*tokenMemory, *refreshGrant) {
	r.mu.Lock()
	e := r.entries[tenant]
	r.mu.Unlock()
	if e == nil {
		return &tokenMemory{}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.grant != nil && conn != nil && e.conn != nil && e.conn.sum == conn.sum {
		return e.tokens, e.grant
	}
	return e.tokens, nil
}

// errNoTenant is Client's answer to an empty tenant.
var errNoTenant = errors.New("tenants: no tenant given")
