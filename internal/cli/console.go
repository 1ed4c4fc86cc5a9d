package cli

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

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
	// ConsoleTrustedProxies are read as addresses or CIDR prefixes into
	// consoleProxies.
	ConsoleTrustedProxies []string `name:"console-trusted-proxies" env:"SYNCER_CONSOLE_TRUSTED_PROXIES" sep:"," placeholder:"CIDR,..." help:"The reverse proxies in front of the console (addresses or CIDR prefixes): wrong console tokens from one of them are counted against the client its X-Forwarded-For names, not against the proxy. Without it the header is never read."`

	consoleFromFile bool
	consoleProxies  []netip.Prefix
}

// validateConsole reads the trusted proxies and the token file, once.
func (c *ConsoleFlags) validateConsole() error {
	c.consoleProxies = c.consoleProxies[:0]
	for _, v := range c.ConsoleTrustedProxies {
		p, err := parseProxy(strings.TrimSpace(v))
		if err != nil {
			return usagef("%s: %q is no address or CIDR prefix", setting(c, "ConsoleTrustedProxies"), v)
		}
		c.consoleProxies = append(c.consoleProxies, p)
	}
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

// parseProxy reads a CIDR prefix, or an address as the prefix of itself.
func parseProxy(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
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
		return console.New(ctx, pool, m, &console.Config{Token: c.ConsoleToken, Formats: formats, TrustedProxies: c.consoleProxies,
			Logger: logger.With(slog.String("component", "console"))})
	}
}
