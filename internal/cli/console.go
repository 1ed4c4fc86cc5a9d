package cli

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/console"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// ConsoleFlags are run's settings of the web console.
type ConsoleFlags struct {
	ConsoleToken     string `name:"console-token" env:"SYNCER_CONSOLE_TOKEN" help:"Serve the web console at /console on the HTTP address, signed in with this token (docs/console.md); without it /console answers 404. Set it in the environment or with --console-token-file, not with this flag. Never logged."`
	ConsoleTokenFile string `name:"console-token-file" env:"SYNCER_CONSOLE_TOKEN_FILE" placeholder:"FILE" help:"Read the console's token from FILE, once at start; a trailing newline is ignored. Exclusive with --console-token."`

	consoleFromFile bool
}

// validateConsole reads the token file, once.
func (c *ConsoleFlags) validateConsole() error {
	if c.ConsoleTokenFile == "" || c.consoleFromFile {
		return nil
	}
	if c.ConsoleToken != "" {
		return usagef("%s and %s are exclusive: set one", setting(c, "ConsoleToken"), setting(c, "ConsoleTokenFile"))
	}
	token, err := readSecretFile(c.ConsoleTokenFile)
	if err != nil {
		return usagef("%s: %v", setting(c, "ConsoleTokenFile"), err)
	}
	c.ConsoleToken, c.consoleFromFile = token, true
	return nil
}

// consoleFunc builds the console for the daemon; nil without a token.
func (c *ConsoleFlags) consoleFunc(pool *pgxpool.Pool, srcs *config.Config, logger *slog.Logger) daemon.ConsoleFunc {
	if c.ConsoleToken == "" {
		return nil
	}
	formats := map[string]string{}
	if srcs != nil {
		for _, d := range srcs.Destinations {
			formats[d.Name] = cmp.Or(d.Format.Name, "syncer")
		}
	}
	return func(ctx context.Context, m *metrics.Metrics) (http.Handler, error) {
		return console.New(ctx, pool, m, &console.Config{Token: c.ConsoleToken, Formats: formats,
			Logger: logger.With(slog.String("component", "console"))})
	}
}
