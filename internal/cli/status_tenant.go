package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/status"
)

// oneTenant prints one tenant of a source with a tenant column
// (status --source S --tenant T).
func (c *StatusCmd) oneTenant(ctx context.Context, pool *pgxpool.Pool, env *Env) error {
	dest, err := tenantSourceDestination(ctx, pool, c.Source)
	if err != nil {
		return fmt.Errorf("syncer status: %w", err)
	}
	t, err := status.ReadTenant(ctx, pool, c.Source, dest, c.Tenant)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(t)
	}
	fmt.Fprintf(env.Stdout, "tenant %s of source %s to %s: %s\n", t.Tenant, c.Source, dest, tenantLine(t))
	return nil
}

// tenantSourceDestination returns the destination of source name, which
// must have a tenant column.
func tenantSourceDestination(ctx context.Context, pool *pgxpool.Pool, name string) (string, error) {
	withTenant, err := sources.TenantSources(ctx, pool)
	if err != nil {
		return "", err
	}
	if _, ok := withTenant[name]; !ok {
		return "", fmt.Errorf("source %s is not installed or has no tenant column", name)
	}
	stats, err := sources.Stats(ctx, pool)
	if err != nil {
		return "", err
	}
	for _, st := range stats {
		if st.Name == name {
			return st.Destination, nil
		}
	}
	return "", fmt.Errorf("source %s is not installed", name)
}

// tenantsLine is a source's tenants by state, in one line.
func tenantsLine(t *status.Tenants) string {
	parts := make([]string, 0, len(breakerstore.TenantStates)+1)
	for _, s := range breakerstore.TenantStates {
		parts = append(parts, fmt.Sprintf("%d %s", t.Counts[s], s))
	}
	line := strings.Join(parts, ", ")
	if t.UnconnectedPending > 0 {
		line += fmt.Sprintf("; %d unconnected with rows waiting", t.UnconnectedPending)
	}
	// Said every time: a SaaS team whose five workspaces are all synced
	// reads "0 ok" otherwise as five workspaces lost (docs/protocol.md
	// section 10.1, "Tenants come and go").
	return line + " (of the tenants with rows pending or failed, or paused)"
}

// tenantLine is one tenant in one line.
func tenantLine(t status.Tenant) string {
	line := fmt.Sprintf("%s: %d pending, %d failed, oldest pending %s", strings.ToUpper(t.State), t.Pending, t.Failed, seconds(t.OldestPendingSeconds))
	if t.Error != "" {
		line += ": " + cut(t.Error)
	}
	return line
}
