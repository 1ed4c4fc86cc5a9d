package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// HoldCmd is what pause and resume share: how long to wait for every
// running daemon to take it.
type HoldCmd struct {
	DestinationCmd
	Within time.Duration `name:"within" default:"10s" placeholder:"DURATION" help:"How long to wait for every running daemon to take it; past it, exit 1 naming those that did not."`
}

// hold runs Pause or Resume with the command's bound.
func (c *HoldCmd) hold(ctx context.Context, what string, do func(context.Context, *pgxpool.Pool, string, string, time.Duration) error) error {
	if c.Within <= 0 {
		return usagef("--within: must be positive")
	}
	return c.act(ctx, what, func(ctx context.Context, pool *pgxpool.Pool, dest, by string) error {
		return do(ctx, pool, dest, by, c.Within)
	})
}

// PauseCmd is `syncer pause`.
type PauseCmd struct{ HoldCmd }

// Run pauses the destination for every daemon, and returns once every
// running daemon holds the pause: a row written after it is not sent.
func (c *PauseCmd) Run(ctx context.Context, env *Env) error {
	if err := c.hold(ctx, "pause", operator.Pause); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "destination %s paused: every running daemon holds the pause; nothing more is sent to it, pending rows are kept, until syncer resume --destination %s\n", c.Destination, c.Destination)
	return nil
}

// ResumeCmd is `syncer resume`.
type ResumeCmd struct{ HoldCmd }

// Run ends a pause, and returns once every running daemon sends again.
func (c *ResumeCmd) Run(ctx context.Context, env *Env) error {
	if err := c.hold(ctx, "resume", operator.Resume); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "destination %s resumed: every running daemon sends to it again\n", c.Destination)
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
