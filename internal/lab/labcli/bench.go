package labcli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/lab/bench"
	"github.com/syncer-dev/syncer/internal/lab/refbuild"
)

// BenchCmd is `syncer-lab bench`.
type BenchCmd struct {
	DatabaseURL string   `name:"bench-database-url" env:"SYNCER_BENCH_DATABASE_URL" default:"${bench_database_url}" help:"PostgreSQL URL of a scratch database the bench may load for minutes and create and drop schemas in. DATABASE_URL is never read, so a bench run in a production container cannot touch the production database."`
	Size        string   `name:"size" enum:"default,tiny" default:"default" help:"default: the sizes the targets are set for (about 10 minutes); tiny: 1-2% of them, a few minutes, for CI."`
	JSON        string   `name:"json" placeholder:"FILE" help:"Also write the report as JSON to FILE."`
	Only        []string `name:"only" sep:"," placeholder:"SCENARIO,..." help:"Run only these scenarios: drain, latency, writer-overhead, memory, memory-limit, job-economy, recipe, deletes, slow-api, unknown-limit, quota, sources, cold-start, fast-limit, restart, handover, cloudevents-drain, elasticsearch-drain, custom-drain, webhooks, console, shapes, receipt, tenants, verify, history, dbshare, sessions, pooler."`
	Rows        []string `name:"rows" sep:"," placeholder:"ROW,..." help:"Run only the rows whose names hold one of these (case-insensitive), for the tenants scenario, whose steps each measure a few rows: --only tenants --rows 'own limits from the query'. Other scenarios run whole."`
	TenantScale float64  `name:"tenant-scale" placeholder:"X" help:"Scale the tenants scenario's sizes by X (1: 200 tenants, 100,000 rows, 10,000 idle tenants; 0.1 for a run of a few minutes). Defaults to 1, or 0.05 with --size tiny."`
	Profile     string   `name:"profile" placeholder:"DIR" help:"Run the drain's daemon with --pprof and save a 10 s CPU profile of its drain in DIR."`
	Binary      string   `name:"binary" hidden:"" help:"The syncer binary run as the daemon; defaults to syncer beside this executable, then on PATH."`
	Against     string   `name:"against" placeholder:"REF" help:"Compare with the daemon built at git ref REF (as make build builds it, kept in bin/refs/): each scenario runs for both binaries, alternated, and the table gives both figures, their ratio and every figure more than 10% worse (exit 1 if any). 'auto': the last tag, else the merge base with main. Runs drain, latency, memory, slow-api, sources and tenants unless --only or --all."`
	Rounds      int      `name:"rounds" default:"3" help:"With --against: how many times each scenario runs on each side."`
	All         bool     `name:"all" help:"With --against: every scenario, the long ones included."`
	Repo        string   `name:"repo" default:"." placeholder:"DIR" help:"With --against: the git repository REF is in."`
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
	if c.Against == "" && (c.All || c.Rounds != 3) {
		return usagef("--all and --rounds go with --against")
	}
	if c.Rounds < 1 {
		return usagef("--rounds: at least 1")
	}
	if c.All && len(c.Only) > 0 {
		return usagef("--all and --only: one or the other")
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
	if c.Against != "" {
		return c.compare(ctx, env, binary)
	}
	rep, err := bench.Run(ctx, &bench.Config{
		DatabaseURL: c.DatabaseURL,
		Size:        c.Size,
		Only:        c.Only,
		Rows:        c.Rows,
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
		if err := writeJSON(c.JSON, rep.WriteJSON); err != nil {
			return err
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

// compare builds the daemon at --against and compares it with binary.
func (c *BenchCmd) compare(ctx context.Context, env *cli.Env, binary string) error {
	ref := c.Against
	if ref == "auto" {
		var err error
		if ref, err = refbuild.DefaultRef(ctx, c.Repo); err != nil {
			return err
		}
	}
	fmt.Fprintf(env.Stderr, "building the daemon at %s as make build does\n", ref)
	base, err := refbuild.Build(ctx, &refbuild.Config{RepoDir: c.Repo, Log: env.Stderr}, ref)
	if err != nil {
		return err
	}
	only := c.Only
	if c.All {
		only = bench.Scenarios
	}
	cmp, err := bench.Compare(ctx, &bench.CompareConfig{
		Config: bench.Config{
			DatabaseURL: c.DatabaseURL,
			Size:        c.Size,
			Only:        only,
			Rows:        c.Rows,
			ProfileDir:  c.Profile,
			TenantScale: c.TenantScale,
			Progress:    env.Stderr,
			Logger:      env.Logger,
		},
		Base:   bench.Side{Name: refName(c.Against, base), Binary: base.Path},
		Head:   bench.Side{Name: headName(ctx, binary), Binary: binary},
		Rounds: c.Rounds,
	})
	if cmp != nil {
		if werr := cmp.WriteTable(env.Stdout); werr != nil && err == nil {
			err = werr
		}
		if c.JSON != "" {
			if werr := writeJSON(c.JSON, cmp.WriteJSON); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		return err
	}
	if worse := cmp.Worse(); len(worse) > 0 {
		return fmt.Errorf("%d figures more than 10%% worse than %s's", len(worse), c.Against)
	}
	return nil
}

// headName is what the daemon under test says of its version, or "head".
func headName(ctx context.Context, binary string) string {
	out, err := exec.CommandContext(ctx, binary, "version").Output()
	if err != nil {
		return "head"
	}
	if f := strings.Fields(string(out)); len(f) >= 2 {
		return f[1]
	}
	return "head"
}

// writeJSON writes a report to path with write.
func writeJSON(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write --json: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write --json: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write --json: %w", err)
	}
	return nil
}

// refName labels the base side: its version, with the ref asked for when
// that is not how git describes it ("auto (3cfe467)", "main (a77f328)").
func refName(asked string, b *refbuild.Binary) string {
	if asked == b.Version || strings.HasPrefix(b.Commit, asked) {
		return b.Version
	}
	return asked + " (" + b.Version + ")"
}
