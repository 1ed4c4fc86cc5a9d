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
// A refresh token the token endpoint rotates while it reads is stored by
// on_refresh, as a deliverer's would be.
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
	tcfg, _, err := r.clientConfig(tenant, conn)
	if err != nil {
		return nil, nil, fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, tenant, err)
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

// errNoTenant is Client's answer to an empty tenant.
var errNoTenant = errors.New("tenants: no tenant given")
