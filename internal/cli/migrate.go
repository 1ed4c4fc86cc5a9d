package cli

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/migrations"
)

// MigrateCmd is `syncer migrate`.
type MigrateCmd struct {
	DB
}

// Run applies River's and syncer's migrations.
func (c *MigrateCmd) Run(ctx context.Context, env *Env) error {
	pool, err := c.open(ctx, "syncer migrate")
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := migrations.Up(ctx, pool, env.Logger)
	if err != nil {
		return err
	}
	if len(res.RiverApplied) == 0 && len(res.Applied) == 0 {
		fmt.Fprintf(env.Stdout, "schema %s is up to date\n", res.Schema)
		return nil
	}
	fmt.Fprintf(env.Stdout, "schema %s: applied %d River and %d syncer migrations\n", res.Schema, len(res.RiverApplied), len(res.Applied))
	return nil
}
