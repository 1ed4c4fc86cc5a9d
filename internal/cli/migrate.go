package cli

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/migrations"
)

// MigrateCmd is `syncer migrate`.
type MigrateCmd struct {
	DB
	ConfigFile
}

// Run applies River's and syncer's migrations.
func (c *MigrateCmd) Run(ctx context.Context, env *Env) error {
	cfg, err := c.ConfigFile.Load(false)
	if err != nil {
		return err
	}
	// Migrate's lock is a session's: on SYNCER_DIRECT_URL when given.
	pool, err := c.openDirect(ctx, "syncer migrate")
	if err != nil {
		return err
	}
	defer pool.Close()
	if c.Schema != "" {
		if err := database.CreateSchema(ctx, pool, c.Schema); err != nil {
			return err
		}
	}
	var installed *sources.InstallResult
	res, err := migrations.UpThen(ctx, pool, env.Logger, installSources(cfg, env.Stdout, &installed))
	printSources(env.Stdout, installed)
	if err != nil {
		return err
	}
	if len(res.RiverApplied) == 0 && len(res.Applied) == 0 && (installed == nil || !installed.Changed()) {
		fmt.Fprintf(env.Stdout, "schema %s is up to date\n", res.Schema)
		return nil
	}
	fmt.Fprintf(env.Stdout, "schema %s: applied %d River and %d syncer migrations\n", res.Schema, len(res.RiverApplied), len(res.Applied))
	return nil
}
