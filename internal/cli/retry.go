package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// RetryFailedCmd is `syncer retry-failed`.
type RetryFailedCmd struct {
	DB
	// ConfigFile, with --tenant, gives the destination's tenants query
	// (checkSourceTenant).
	ConfigFile
	ID     []int64 `name:"id" help:"Only these rows (repeatable); all failed rows when absent."`
	Source string  `name:"source" placeholder:"NAME" help:"The failed keys of configured source NAME instead of failed rows of resources."`
	// sep:"none": a composite key is a JSON array, whose commas kong
	// would otherwise split into several keys that match nothing.
	Tenant tenant.Tenant `name:"tenant" placeholder:"VALUE" help:"With --source (a source with a tenant column): only this tenant's failed keys."`

	Key []string `name:"key" sep:"none" placeholder:"K" help:"With --source: only this key, in its text form as status shows it (a composite key is one JSON array, e.g. --key '[\"acme\",42]'); repeat --key for more keys; all failed keys when absent."`
}

// Validate refuses --id with --source.
func (c *RetryFailedCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if c.Source != "" && len(c.ID) > 0 {
		return usagef("--id and --source are exclusive")
	}
	if c.Source == "" && len(c.Key) > 0 {
		return usagef("--key needs --source")
	}
	if c.Tenant != "" && (c.Source == "" || len(c.Key) > 0) {
		return usagef("--tenant needs --source (a source with a tenant column) and takes no --key")
	}
	return nil
}

// retryDefaultSource is the source retry-failed retries without
// --source: its --id are resources' ids.
const retryDefaultSource = rows.ResourcesName

// Run clears the failures and wakes the daemons in the same transaction.
func (c *RetryFailedCmd) Run(ctx context.Context, env *Env) error {
	pool, err := c.openMigrated(ctx, "syncer retry-failed")
	if err != nil {
		return err
	}
	defer pool.Close()
	if c.Tenant != "" {
		if err := checkSourceTenant(ctx, pool, &c.ConfigFile, c.Source, c.Tenant); err != nil {
			var unknown *operator.UnknownTenantError
			var none *operator.NoSourceError
			if errors.As(err, &unknown) || errors.As(err, &none) {
				return usagef("--tenant: %v", err)
			}
			return fmt.Errorf("retry failed keys: %w", err)
		}
		n, err := operator.Retry(ctx, pool, rows.Scope{Source: c.Source, Tenant: c.Tenant}, nil)
		if err != nil {
			return fmt.Errorf("retry failed keys: %w", err)
		}
		fmt.Fprintf(env.Stdout, "source %s tenant %s: %s eligible again\n", c.Source, c.Tenant, count(n, "failed key is", "failed keys are"))
		return nil
	}
	if c.Source != "" {
		keys, err := c.retrySource(ctx, env, pool)
		if err != nil {
			return err
		}
		return c.releaseHeld(ctx, pool, env, c.Source, keys)
	}
	// Resources: the ids named, or every failed row.
	var ids []string
	for _, id := range c.ID {
		ids = append(ids, strconv.FormatInt(id, 10))
	}
	n, err := operator.Retry(ctx, pool, rows.Scope{Source: retryDefaultSource}, ids)
	if err != nil {
		return fmt.Errorf("retry failed rows: %w", err)
	}
	fmt.Fprintf(env.Stdout, "%s eligible again\n", count(n, "failed row is", "failed rows are"))
	return c.releaseHeld(ctx, pool, env, retryDefaultSource, ids)
}

// releaseHeld makes the held keys named (all when none is) go now, and
// says how many there were when any.
func (c *RetryFailedCmd) releaseHeld(ctx context.Context, pool *pgxpool.Pool, env *Env, source string, keys []string) error {
	n, err := operator.ReleaseHeld(ctx, pool, source, keys)
	if err != nil {
		return fmt.Errorf("release held keys: %w", err)
	}
	if n > 0 {
		fmt.Fprintf(env.Stdout, "%s: %s again now\n", source, count(n, "held key goes", "held keys go"))
	}
	return nil
}

// count says n things, in the singular for one: count(1, "failed key is",
// "failed keys are") is "1 failed key is".
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
