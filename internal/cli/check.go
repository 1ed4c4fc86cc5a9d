package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/migrations"
)

// checkTimeoutDefault bounds how long config check waits for a
// destination's URL to answer.
const checkTimeoutDefault = 5 * time.Second

// ConfigCmd groups the commands on the configuration file.
type ConfigCmd struct {
	Check ConfigCheckCmd `cmd:"" help:"Read the file and the database, change nothing, and print one line per problem, naming the source or destination. Exit 0 when there is none, 1 otherwise."`
}

// ConfigCheckCmd is `syncer config check`.
type ConfigCheckCmd struct {
	DB
	ConfigFile
	Timeout time.Duration `name:"timeout" env:"SYNCER_CHECK_TIMEOUT" default:"${check_timeout}" help:"How long a destination's URL may take to answer."`
	NoProbe bool          `name:"no-probe" env:"SYNCER_CHECK_NO_PROBE" help:"Do not probe the destinations' URLs (a HEAD request each, without token, which a strict receiver may log as an attack)."`
}

// errProblems is config check's failure: its problems are printed, one a
// line, on stdout.
type errProblems int

func (e errProblems) Error() string {
	if e == 1 {
		return "1 problem"
	}
	return strconv.Itoa(int(e)) + " problems"
}

// Validate requires the file.
func (c *ConfigCheckCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if c.Config == "" {
		return usagef("%s is required: the file to check", setting(&c.ConfigFile, "Config"))
	}
	return positive(c, "Timeout")
}

// Run checks the file, its secrets, its destinations' URLs and, against
// the database, its sources and what migrate would change.
func (c *ConfigCheckCmd) Run(ctx context.Context, env *Env) error {
	var problems []string
	say := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	done := func() error {
		for _, p := range problems {
			fmt.Fprintln(env.Stdout, oneLine(p))
		}
		if len(problems) > 0 {
			return errProblems(len(problems))
		}
		return nil
	}

	// Secrets are read below, every one, so that all that are missing are
	// named, not only the first.
	cfg, err := config.Load(c.Config, nil)
	if err != nil {
		if !config.IsConfigError(err) {
			return err
		}
		say("%s: %s", c.Config, entryLine(err.Error()))
		return done()
	}
	for _, s := range cfg.Secrets {
		if _, err := s.Read(os.Getenv); err != nil {
			say("%s", entryLine(err.Error()))
		}
	}
	client := &http.Client{
		Timeout: c.Timeout,
		// A redirect is an answer: the URL is reachable (run reports it).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	for _, d := range cfg.Destinations {
		if c.NoProbe || d.URL == "" || strings.Contains(d.URL, "{tenant}") {
			continue // a tenant's URL is its row's: nothing to probe without one
		}
		// Said on stderr, so stdout stays one line per problem.
		fmt.Fprintf(env.Stderr, "config check: probing destination %s with a HEAD request, no token sent (--no-probe skips it)\n", d.Name)
		if reason := unreachable(ctx, client, d.URL); reason != "" {
			say("destination %s: url: unreachable: %s (line %d)", d.Name, reason, d.Line)
		}
	}

	pool, err := c.open(ctx, "syncer config check")
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, d := range cfg.Destinations {
		if err := tenants.Check(ctx, pool, d.Tenants, tenantsCheckSpec(d)); err != nil {
			say("destination %s: %s (line %d)", d.Name, err.Error(), d.Line)
		}
	}
	if err := c.checkSchema(ctx, pool); err != nil {
		// A fresh installation: the tables can still be checked; what is
		// installed cannot (another schema of the search_path may hold an
		// older installation).
		say("database: schema %s does not exist: migrate would create it, with every table of syncer's and River's", c.Schema)
		plan, err := sources.PlanInstall(ctx, pool, cfg.SourceSpecs())
		if err != nil {
			return err
		}
		for _, p := range plan.Problems {
			say("%s", p.Error())
		}
		return done()
	}
	river, ours, err := migrations.Pending(ctx, pool)
	if err != nil {
		return err
	}
	if len(river) > 0 || len(ours) > 0 {
		names := make([]string, len(ours))
		for i, m := range ours {
			names[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
		}
		say("database: migrate would apply %d River migrations and %d of syncer's (%s)", len(river), len(ours), strings.Join(names, ", "))
	}
	plan, err := sources.PlanInstall(ctx, pool, cfg.SourceSpecs())
	if err != nil {
		return err
	}
	for _, p := range plan.Problems {
		say("%s", p.Error())
	}
	for _, ch := range plan.Changes {
		switch ch.Action {
		case sources.Installed:
			say("source %s: triggers not installed: migrate would install them (run syncer migrate with this file)", ch.Source)
		case sources.Removed:
			say("source %s: installed and no longer in the file: migrate would remove its triggers and pending work", ch.Source)
		default:
			say("source %s: %s: migrate would update it (run syncer migrate with this file)", ch.Source, ch.Detail)
		}
	}
	if len(problems) == 0 {
		fmt.Fprintf(env.Stdout, "%s: %d sources, %d destinations: no problem\n", c.Config, len(cfg.Sources), len(cfg.Destinations))
	}
	return done()
}

// entryLine writes a config error as check's lines read: "destination
// crm: token_env: ..." rather than the file's path "destinations.crm.token_env".
func entryLine(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "destinations."); ok {
		name, field, found := strings.Cut(rest, ".")
		if found {
			return "destination " + name + ": " + field
		}
		return "destination " + rest
	}
	return msg
}

// unreachable asks url with a HEAD and says why nothing answered; any
// answer, whatever its status, is reachable. No token is sent, and the
// reason never quotes the URL.
func unreachable(ctx context.Context, client *http.Client, raw string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, raw, nil)
	if err != nil {
		return "not a URL"
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
			return "no answer in " + durationText(client.Timeout)
		}
		return err.Error()
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return ""
}

// tenantsCheckSpec is what tenants.Check must know of destination d.
func tenantsCheckSpec(d *config.Destination) tenants.CheckSpec {
	return tenants.CheckSpec{
		HasURL:      d.URL != "",
		HasTokenURL: d.Auth != nil && d.Auth.TokenURL != "",
		Programs:    d.Format.Name == custom.Name,
	}
}
