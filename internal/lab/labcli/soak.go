package labcli

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/lab/soak"
)

// SoakCmd is `syncer-lab soak`: the seeded chaos run of docs/tests.md.
type SoakCmd struct {
	Duration time.Duration `name:"duration" env:"SOAK_DURATION" default:"10m" help:"How long faults and writes go on; everything then drains and is checked."`
	Seed     uint64        `name:"seed" env:"SOAK_SEED" help:"Seed of the fault schedule and the writes; a run's report names it, and the same seed replays the same schedule. Drawn and printed when unset."`
	Daemons  int           `name:"daemons" default:"3" help:"syncer run processes sharing the work (2 or 3)."`
	Rate     float64       `name:"rate" default:"60" help:"Writers' statements a second, all tables together."`
	PGBin    string        `name:"pg-bin" help:"Bin directory of the PostgreSQL server the soak runs for itself (initdb, pg_ctl); defaults to the newest under /usr/lib/postgresql."`
	Pooler   string        `name:"pooler" env:"SOAK_POOLER" placeholder:"LEG" help:"The pooler leg: the last daemon's DATABASE_URL through a PgBouncer of the soak's own in transaction mode, restarted and paused by the schedule. direct (the default) gives that daemon SYNCER_DIRECT_URL straight to the server, pooled none; off routes no daemon through a pooler."`
	Dir      string        `name:"dir" placeholder:"DIR" help:"Keep the run's files (the cluster, every daemon's log) here; by default a scratch directory, kept only when a check failed."`
	Binary   string        `name:"binary" hidden:"" help:"The syncer binary run as the daemons; defaults to syncer beside this executable, then on PATH."`
}

// Validate names the first bad setting.
func (c *SoakCmd) Validate() error {
	if c.Duration < 30*time.Second {
		return usagef("--duration (SOAK_DURATION) must be at least 30s, got %s", c.Duration)
	}
	if c.Daemons < 2 || c.Daemons > 3 {
		return usagef("--daemons must be 2 or 3, got %d", c.Daemons)
	}
	switch c.Pooler {
	case "", soak.PoolerDirect, soak.PoolerOnly, soak.PoolerOff:
	default:
		return usagef("--pooler (SOAK_POOLER) must be %s, %s or %s, got %q", soak.PoolerDirect, soak.PoolerOnly, soak.PoolerOff, c.Pooler)
	}
	if c.Rate <= 0 {
		return usagef("--rate must be positive, got %v", c.Rate)
	}
	return nil
}

// Run runs the soak; a violation exits 1 after the report.
func (c *SoakCmd) Run(ctx context.Context, env *cli.Env) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	seed := c.Seed
	if seed == 0 {
		seed = rand.Uint64() % 1_000_000_000
	}
	binary, err := syncerBinary(c.Binary)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	pooler := cmp.Or(c.Pooler, soak.PoolerDefault)
	fmt.Fprintf(env.Stderr, "soak: seed %d, %s, %d daemons, pooler leg %s\n", seed, c.Duration, c.Daemons, pooler)
	return soak.Run(ctx, &soak.Config{
		Binary: binary, Duration: c.Duration, Seed: seed, Daemons: c.Daemons, Rate: c.Rate,
		PGBin: c.PGBin, Dir: c.Dir, Pooler: pooler, Out: env.Stdout, Progress: env.Stderr, Logger: env.Logger,
	})
}
