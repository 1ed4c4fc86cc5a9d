package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// DestinationCmd is what pause, resume and probe share: the database and
// the destination's name.
type DestinationCmd struct {
	DB
	// ConfigFile, with --tenant, gives the destination's tenants query,
	// run to find a tenant that has a connection row and nothing else.
	ConfigFile
	Destination string        `name:"destination" required:"" placeholder:"NAME" help:"A destination of the installed sources (see syncer status)."`
	Tenant      tenant.Tenant `name:"tenant" placeholder:"VALUE" help:"One tenant of the destination (a source's tenant column's value): act on that tenant's account alone. A tenant with no row in the sources, no connection row (the tenants query of --config) and nothing syncer keeps of it is refused (exit 2)."`
}

// subject is what the command acts on, for its lines.
func (c *DestinationCmd) subject() string {
	if c.Tenant != "" {
		return fmt.Sprintf("tenant %s of destination %s", c.Tenant, c.Destination)
	}
	return "destination " + c.Destination
}

// act runs an action on the destination; an unknown one, or an unknown
// tenant, is a usage error.
func (c *DestinationCmd) act(ctx context.Context, what string, do func(context.Context, *pgxpool.Pool, string, string) error) error {
	pool, err := c.openMigrated(ctx, "syncer "+what)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := do(ctx, pool, c.Destination, operator.ByCommandLine); err != nil {
		return c.actionError(what, err)
	}
	return nil
}

// actionError is err of action what: an unknown destination or tenant is
// the flags' fault (exit 2).
func (c *DestinationCmd) actionError(what string, err error) error {
	var unknown *operator.UnknownTenantError
	switch {
	case errors.As(err, &unknown):
		force := ""
		if what == "pause" {
			force = "; --force pauses it ahead of its first row"
		}
		return usagef("--tenant: %v%s", err, force)
	case errors.Is(err, operator.ErrUnknown):
		return usagef("--destination: %v", err)
	}
	return fmt.Errorf("%s %s: %w", what, c.subject(), err)
}

// HoldCmd is what pause and resume share: how long to wait for every
// running daemon to take it.
type HoldCmd struct {
	DestinationCmd
	Within time.Duration `name:"within" default:"${presence_within}" placeholder:"DURATION" help:"How long to wait for every running daemon to take it; past it, exit 1 naming those that did not."`
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
type PauseCmd struct {
	HoldCmd
	Force bool `name:"force" help:"With --tenant: pause it even though nothing of it is known yet (no row, no connection row): ahead of its first row."`
}

// Validate refuses --force without --tenant.
func (c *PauseCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if c.Force && c.Tenant == "" {
		return usagef("--force goes with --tenant: a destination is paused without it")
	}
	return nil
}

// Run pauses the destination for every daemon, and returns once every
// running daemon holds the pause: a row written after it is not sent.
func (c *PauseCmd) Run(ctx context.Context, env *Env) error {
	if c.Tenant != "" {
		if err := c.act(ctx, "pause", func(ctx context.Context, pool *pgxpool.Pool, dest, by string) error {
			check, err := tenantCheck(&c.ConfigFile, pool, c.Force)
			if err != nil {
				return err
			}
			return operator.PauseTenant(ctx, pool, dest, c.Tenant, by, check)
		}); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "%s paused: its deliverer holds within a second; its pending rows are kept, every other tenant's go on, until syncer resume --destination %s --tenant %s\n", c.subject(), c.Destination, c.Tenant)
		return nil
	}
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
	if c.Tenant != "" {
		if err := c.act(ctx, "resume", func(ctx context.Context, pool *pgxpool.Pool, dest, by string) error {
			check, err := tenantCheck(&c.ConfigFile, pool, false)
			if err != nil {
				return err
			}
			return operator.ResumeTenant(ctx, pool, dest, c.Tenant, by, check)
		}); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "%s resumed: its rows are sent again\n", c.subject())
		return nil
	}
	var paused []string
	if err := c.hold(ctx, "resume", func(ctx context.Context, pool *pgxpool.Pool, dest, by string, within time.Duration) error {
		if err := operator.Resume(ctx, pool, dest, by, within); err != nil {
			return err
		}
		// A tenant's own pause outlives the destination's: say so, or
		// the person believes every tenant's rows go again.
		facts, err := breakerstore.ReadTenants(ctx, pool, dest)
		paused = status.PausedTenants(facts)
		return err
	}); err != nil {
		return err
	}
	if len(paused) > 0 {
		fmt.Fprintf(env.Stdout, "destination %s resumed: every running daemon sends to it again, except to its %s still paused on their own: %s (syncer resume --destination %s --tenant T)\n",
			c.Destination, count(int64(len(paused)), "tenant", "tenants"), strings.Join(paused, ", "), c.Destination)
		return nil
	}
	fmt.Fprintf(env.Stdout, "destination %s resumed: every running daemon sends to it again\n", c.Destination)
	return nil
}

// ProbeCmd is `syncer probe`.
type ProbeCmd struct {
	DestinationCmd
	Wait time.Duration `name:"wait" default:"${probe_wait}" help:"How long to wait for the probe's answer from a running daemon."`
}

// probeWaitDefault is --wait's default: a held destination's daemon takes
// the probe at its next attempt, within exporter.MaxSnoozeDefault (10 s),
// and waits for the answer within the request's timeout.
const probeWaitDefault = 30 * time.Second

// Run asks the daemons to probe the held destination now, waits for the
// answer and prints it: exit 0 when the destination takes requests again
// (or nothing held it), 1 when it is still refused or no daemon answered
// within --wait.
func (c *ProbeCmd) Run(ctx context.Context, env *Env) error {
	if c.Wait <= 0 {
		return usagef("--wait must be positive, got %s", c.Wait)
	}
	pool, err := c.openMigrated(ctx, "syncer probe")
	if err != nil {
		return err
	}
	defer pool.Close()
	ask, wait := operator.AskProbe, operator.WaitProbeAnswer
	if c.Tenant != "" {
		ask = func(ctx context.Context, pool *pgxpool.Pool, dest, by string) (breakerstore.Probe, bool, error) {
			check, err := tenantCheck(&c.ConfigFile, pool, false)
			if err != nil {
				return breakerstore.Probe{}, false, err
			}
			return operator.ProbeTenant(ctx, pool, dest, c.Tenant, by, check)
		}
		wait = func(ctx context.Context, pool *pgxpool.Pool, dest string, p breakerstore.Probe) (breakerstore.ProbeAnswer, error) {
			return operator.WaitTenantProbeAnswer(ctx, pool, dest, c.Tenant, p)
		}
	}
	p, held, err := ask(ctx, pool, c.Destination, operator.ByCommandLine)
	if err != nil {
		return c.actionError("probe", err)
	}
	if !held {
		fmt.Fprintf(env.Stdout, "%s: nothing to probe: neither its credentials nor its URL are refused (see syncer status)\n", c.subject())
		return nil
	}
	fmt.Fprintf(env.Stdout, "%s: probe asked; waiting up to %s for a daemon's answer\n", c.subject(), c.Wait)
	wctx, cancel := context.WithTimeout(ctx, c.Wait)
	defer cancel()
	a, err := wait(wctx, pool, c.Destination, p)
	switch {
	case err != nil && ctx.Err() == nil && wctx.Err() != nil:
		fmt.Fprintf(env.Stdout, "%s: no daemon answered within %s: is a daemon running with this destination, with rows pending for it, and not paused? (see syncer status)\n", c.subject(), c.Wait)
		return fmt.Errorf("%s: no answer within %s", c.subject(), c.Wait)
	case err != nil:
		return fmt.Errorf("probe %s: %w", c.subject(), err)
	case a.Accepted && !a.Held:
		fmt.Fprintf(env.Stdout, "%s: probe accepted at %s: the destination takes requests again\n", c.subject(), a.At.Format(time.RFC3339))
		return nil
	default:
		status := ""
		if a.Status != 0 {
			status = fmt.Sprintf(" with status %d", a.Status)
		}
		fmt.Fprintf(env.Stdout, "%s: probe answered%s at %s, still held: %s\n", c.subject(), status, a.At.Format(time.RFC3339), cmp.Or(a.Text, "a refusal stands"))
		return fmt.Errorf("%s: still held", c.subject())
	}
}

// tenantCheck is how a command with --tenant makes sure the tenant is
// real (operator.TenantCheck): with --config (SYNCER_CONFIG), each
// destination's tenants query is run for it too, on pool, and only
// whether it gives a row is kept.
func tenantCheck(cf *ConfigFile, pool *pgxpool.Pool, force bool) (operator.TenantCheck, error) {
	check := operator.TenantCheck{Force: force}
	cfg, err := cf.Load(false)
	if err != nil || cfg == nil {
		return check, err
	}
	check.Connected = map[string]func(context.Context, string) (bool, error){}
	for _, d := range cfg.Destinations {
		if s := d.Tenants; s != nil {
			check.Connected[d.Name] = func(ctx context.Context, tenant string) (bool, error) {
				return tenants.HasRow(ctx, pool, s, tenant)
			}
		}
	}
	return check, nil
}

// checkSourceTenant refuses --tenant T of --source S when T has nothing
// anywhere (operator.CheckSourceTenant): replay and retry-failed ask it
// before they act.
func checkSourceTenant(ctx context.Context, pool *pgxpool.Pool, cf *ConfigFile, source string, t tenant.Tenant) error {
	check, err := tenantCheck(cf, pool, false)
	if err != nil {
		return err
	}
	return operator.CheckSourceTenant(ctx, pool, source, t, check)
}
