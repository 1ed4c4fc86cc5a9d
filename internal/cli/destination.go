package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/operator"
)

// DestinationCmd is what pause, resume and probe share: the database and
// the destination's name.
type DestinationCmd struct {
	DB
	Destination string `name:"destination" required:"" placeholder:"NAME" help:"A destination of the installed sources (see syncer status)."`
}

// act runs an action on the destination; an unknown one is a usage error.
func (c *DestinationCmd) act(ctx context.Context, what string, do func(context.Context, *pgxpool.Pool, string, string) error) error {
	pool, err := c.openMigrated(ctx, "syncer "+what)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := do(ctx, pool, c.Destination, operator.ByCommandLine); err != nil {
		if errors.Is(err, operator.ErrUnknown) {
			return usagef("--destination: %v", err)
		}
		return fmt.Errorf("%s destination %s: %w", what, c.Destination, err)
	}
	return nil
}

// PauseCmd is `syncer pause`.
type PauseCmd struct{ DestinationCmd }

// Run pauses the destination for every daemon.
func (c *PauseCmd) Run(ctx context.Context, env *Env) error {
	if err := c.act(ctx, "pause", operator.Pause); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "destination %s paused: nothing is sent to it, pending rows are kept, until syncer resume --destination %s\n", c.Destination, c.Destination)
	return nil
}

// ResumeCmd is `syncer resume`.
type ResumeCmd struct{ DestinationCmd }

// Run ends a pause.
func (c *ResumeCmd) Run(ctx context.Context, env *Env) error {
	if err := c.act(ctx, "resume", operator.Resume); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "destination %s resumed\n", c.Destination)
	return nil
}

// ProbeCmd is `syncer probe`.
type ProbeCmd struct{ DestinationCmd }

// Run asks the daemons to probe the held destination now.
func (c *ProbeCmd) Run(ctx context.Context, env *Env) error {
	if err := c.act(ctx, "probe", operator.Probe); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "destination %s: the daemons probe it within seconds if its credentials or URL were refused; see syncer status\n", c.Destination)
	return nil
}
