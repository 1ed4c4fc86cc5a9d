package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/sources"
)

// ConfigFile is the --config setting of the commands that install or
// export sources (the application's own tables): migrate and run.
type ConfigFile struct {
	Config string `name:"config" env:"SYNCER_CONFIG" help:"YAML file of the sources (application tables) to export and their destinations; see docs/configured-mode.md. Without it, resources is exported to --thirdparty-url."`
}

// Load reads the file named by --config: nil when none is named. Tokens are
// read from the environment only when withTokens (run needs them, migrate
// does not). A bad file is a usage error (exit 2) naming the source or
// destination and the field.
func (c *ConfigFile) Load(withTokens bool) (*config.Config, error) {
	if c.Config == "" {
		return nil, nil
	}
	var getenv func(string) string
	if withTokens {
		getenv = os.Getenv
	}
	cfg, err := config.Load(c.Config, getenv)
	if err != nil {
		if config.IsConfigError(err) {
			return nil, usagef("--config (SYNCER_CONFIG) %s: %s", c.Config, err)
		}
		return nil, err
	}
	return cfg, nil
}

// installSources returns what migrate runs after the migrations, under
// their lock: the sources of cfg installed, or, without a configuration,
// the installed sources left alone (a migrate run without --config must
// not uninstall them) with a note saying so.
func installSources(cfg *config.Config, out io.Writer, res **sources.InstallResult) func(ctx context.Context, conn *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		if cfg == nil {
			n, err := sources.CountInstalled(ctx, conn)
			if err != nil {
				return err
			}
			if n > 0 {
				fmt.Fprintf(out, "%d sources installed and left as they are: pass --config (SYNCER_CONFIG) to update or remove them\n", n)
			}
			return nil
		}
		r, err := sources.Install(ctx, conn, cfg.SourceSpecs())
		*res = r
		return err
	}
}

// printSources says what Install changed.
func printSources(out io.Writer, res *sources.InstallResult) {
	if res == nil {
		return
	}
	for _, c := range res.Changes {
		switch {
		case c.Action == sources.Unchanged:
		case c.Detail != "":
			fmt.Fprintf(out, "source %s: %s (%s)\n", c.Source, c.Action, c.Detail)
		default:
			fmt.Fprintf(out, "source %s: %s\n", c.Source, c.Action)
		}
	}
}
