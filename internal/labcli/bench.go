package labcli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncer-dev/syncer/internal/bench"
	"github.com/syncer-dev/syncer/internal/cli"
)

// BenchCmd is `syncer-lab bench`.
type BenchCmd struct {
	DatabaseURL string   `name:"bench-database-url" env:"SYNCER_BENCH_DATABASE_URL" default:"${bench_database_url}" help:"PostgreSQL URL of a scratch database the bench may load for minutes and create and drop schemas in. DATABASE_URL is never read, so a bench run in a production container cannot touch the production database."`
	Size        string   `name:"size" enum:"default,tiny" default:"default" help:"default: the sizes the targets are set for (about 10 minutes); tiny: 1-2% of them, a few minutes, for CI."`
	JSON        string   `name:"json" placeholder:"FILE" help:"Also write the report as JSON to FILE."`
	Only        []string `name:"only" sep:"," placeholder:"SCENARIO,..." help:"Run only these scenarios: drain, latency, writer-overhead, memory, memory-limit, job-economy, recipe, deletes, slow-api, unknown-limit, quota, sources, cold-start, fast-limit, restart, handover, cloudevents-drain, elasticsearch-drain, custom-drain, webhooks, console, shapes, receipt, tenants, verify, history."`
	TenantScale float64  `name:"tenant-scale" placeholder:"X" help:"Scale the tenants scenario's sizes by X (1: 200 tenants, 100,000 rows, 10,000 idle tenants; 0.1 for a run of a few minutes). Defaults to 1, or 0.05 with --size tiny."`
	Profile     string   `name:"profile" placeholder:"DIR" help:"Run the drain's daemon with --pprof and save a 10 s CPU profile of its drain in DIR."`
	Binary      string   `name:"binary" hidden:"" help:"The syncer binary run as the daemon; defaults to syncer beside this executable, then on PATH."`
}

// Validate names the first bad setting.
func (c *BenchCmd) Validate() error {
	if c.DatabaseURL == "" {
		return usagef("--bench-database-url (SYNCER_BENCH_DATABASE_URL) is required")
	}
	for _, s := range c.Only {
		known := false
		for _, k := range bench.Scenarios {
			known = known || s == k
		}
		if !known {
			return usagef("--only: unknown scenario %q", s)
		}
	}
	return nil
}

// Run runs the scenarios and prints one table; progress goes to stderr.
func (c *BenchCmd) Run(ctx context.Context, env *cli.Env) error {
	// Scratch schemas and daemons are cleaned up on SIGINT too.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	binary, err := syncerBinary(c.Binary)
	if err != nil {
		return err
	}
	rep, err := bench.Run(ctx, &bench.Config{
		DatabaseURL: c.DatabaseURL,
		Size:        c.Size,
		Only:        c.Only,
		Binary:      binary,
		ProfileDir:  c.Profile,
		TenantScale: c.TenantScale,
		Progress:    env.Stderr,
		Logger:      env.Logger,
	})
	if err != nil {
		return err
	}
	if err := rep.WriteTable(env.Stdout); err != nil {
		return err
	}
	if c.JSON != "" {
		f, err := os.Create(c.JSON)
		if err != nil {
			return fmt.Errorf("write --json: %w", err)
		}
		if err := rep.WriteJSON(f); err != nil {
			f.Close()
			return fmt.Errorf("write --json: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("write --json: %w", err)
		}
	}
	if rep.Failed() {
		return fmt.Errorf("some scenarios could not be measured; see the table")
	}
	return nil
}

// BenchWebhooksClientCmd is the plain client the bench's webhooks row
// measures syncer against, run by the bench as a process of its own, as
// the daemon is. Hidden: it is the bench's, not a user's.
type BenchWebhooksClientCmd struct {
	URL  string `name:"url" required:"" help:"The receiver's URL."`
	Rows int    `name:"rows" default:"20000" help:"Signed requests to send."`
}

// Run sends the requests and prints the requests a second and the CPU
// seconds spent sending them.
func (c *BenchWebhooksClientCmd) Run(ctx context.Context, env *cli.Env) error {
	rate, cpu, err := bench.PlainWebhooks(ctx, c.URL, c.Rows)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Stdout, "%f %f\n", rate, cpu)
	return err
}

// BenchPollerCmd is the plain polling exporter the bench's receipt rows
// measure the daemon's CPU against, run by the bench as a process of its
// own, as the daemon is. Hidden: it is the bench's, not a user's.
type BenchPollerCmd struct {
	DatabaseURL string        `name:"database-url" required:"" help:"The scratch schema's database URL (its search_path names the schema)."`
	URL         string        `name:"url" required:"" help:"The fake third party's URL."`
	Every       time.Duration `name:"every" default:"20ms" help:"How often it looks."`
}

// Run exports rows until SIGTERM.
func (c *BenchPollerCmd) Run(ctx context.Context, _ *cli.Env) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return bench.PlainPoller(ctx, c.DatabaseURL, c.URL, c.Every)
}
