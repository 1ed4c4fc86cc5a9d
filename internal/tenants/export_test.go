package tenants

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// ClaimKey is the syncer_state key of tenant t's refresh claim at
// destination (claim.go), for tests that leave one behind.
func ClaimKey(destination, t string) string {
	return breakerstore.TenantNamespace(destination, tenant.Tenant(t)) + claimSuffix
}

// WaitClaimed is keepStoring's wait of d between its tries, in a process
// named owner that holds tenant t's claim at destination.
func WaitClaimed(ctx context.Context, pool *pgxpool.Pool, destination, t, owner string, d time.Duration) bool {
	g := &refreshGrant{pool: pool, claimKey: ClaimKey(destination, t), mem: &tokenMemory{owner: owner, claimed: true}, logger: slog.New(slog.DiscardHandler)}
	return g.waitClaimed(ctx, d)
}
