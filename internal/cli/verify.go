package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// exitDrift is verify's exit status when something drifted.
const exitDrift = 3

// exitStatus is an error that carries an exit status of its own, its
// output already printed: Main exits with it and prints nothing more.
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// VerifyCmd is `syncer verify` (docs/protocol.md, "Verify and heal").
type VerifyCmd struct {
	DB
	ConfigFile
	Source     string  `name:"source" required:"" placeholder:"NAME" help:"The source to verify: resources, or a configured source (with --config)."`
	Tenant     string  `name:"tenant" placeholder:"T" help:"Only this tenant's keys, read with its account's credentials (sources with tenants only)."`
	FromKey    string  `name:"from-key" placeholder:"K" help:"First key to check (inclusive); the first key when absent."`
	ToKey      string  `name:"to-key" placeholder:"K" help:"Last key to check (inclusive); the last key when absent."`
	Sample     float64 `name:"sample" default:"1" help:"Share of the keys checked, drawn at random (above 0, at most 1): 0.05 checks one key in twenty."`
	Heal       bool    `name:"heal" help:"Make each drifted key pending again as a new version (a tombstone for a zombie): the running daemons send them. Nothing is sent by verify itself."`
	JSON       bool    `name:"json" help:"Print the result as one JSON object."`
	LookupSize int     `name:"lookup-size" default:"${lookup_size}" help:"Ids asked for in one lookup, at most."`

	// The destination of resources, as syncer run takes it.
	ThirdpartyURL    string  `name:"thirdparty-url" env:"SYNCER_THIRDPARTY_URL" help:"Base URL of the third-party API of resources (lookups go to URL/v1/lookup)."`
	ThirdpartyToken  string  `name:"thirdparty-token" env:"SYNCER_THIRDPARTY_TOKEN" help:"Bearer token sent to the third party, if set; set it in the environment. Never logged."`
	ThirdpartyFormat string  `name:"thirdparty-format" env:"SYNCER_THIRDPARTY_FORMAT" default:"syncer" help:"Format of the resources destination: syncer or elasticsearch have a read API."`
	RateLimit        float64 `name:"rate-limit" env:"SYNCER_RATE_LIMIT" default:"0" help:"Requests a second to the third party, as the daemons are given it; verify takes a quarter of it while rows are pending. 0 means no limit."`
	RateBurst        int     `name:"rate-burst" env:"SYNCER_RATE_BURST" default:"${rate_burst}" help:"Burst of the rate limit."`

	// registries are the tenants registries built for the run's accounts:
	// closed before it returns, so that a rotated refresh token whose
	// store is being retried gets stored (tenants.StoreGrace).
	registries []*tenants.Registry
}

// Validate checks the flags that need no database.
func (c *VerifyCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if c.Sample <= 0 || c.Sample > 1 {
		return usagef("--sample must be above 0 and at most 1, got %g", c.Sample)
	}
	if c.LookupSize <= 0 {
		return usagef("--lookup-size must be positive, got %d", c.LookupSize)
	}
	if c.RateLimit < 0 {
		return usagef("--rate-limit (SYNCER_RATE_LIMIT) must not be negative, got %g", c.RateLimit)
	}
	if c.Tenant != "" && c.Source == jobs.Resources {
		return usagef("--tenant %s: source resources has no tenants (no tenant column)", c.Tenant)
	}
	return nil
}

// Run verifies the source and prints the result; it returns an exitStatus
// of 3 when something drifted.
func (c *VerifyCmd) Run(ctx context.Context, env *Env) error {
	// SIGINT or SIGTERM ends the run after its page: its progress is saved
	// and the same command resumes it.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := c.openMigrated(ctx, "syncer verify")
	if err != nil {
		return err
	}
	defer pool.Close()
	defer c.closeRegistries()
	if et, err := c.everyTenantOf(ctx, pool); err != nil {
		return err
	} else if et != nil {
		return c.runEveryTenant(ctx, env, pool, et)
	}
	src, rd, limit, burst, dest, err := c.build(ctx, pool, env.Logger)
	if err != nil {
		return err
	}
	schema, err := database.CurrentSchema(ctx, pool)
	if err != nil {
		return err
	}
	if err := verify.CheckIdle(ctx, pool, schema, src.Name()); err != nil {
		return err
	}
	ns := breakerstore.DestinationNamespace(dest)
	if c.Tenant != "" {
		// The tenant's account has its own rate limit, learned and held
		// apart from the other tenants' (section 10).
		ns = breakerstore.TenantNamespace(dest, c.Tenant)
	}
	pace, err := sharedPace(pool, limit, burst, ns)
	if err != nil {
		return err
	}
	defer releasePace(ctx, pace, env.Logger)
	res, err := verify.Run(ctx, pool, src, rd, &verify.Config{
		Range:      verify.Range{FromKey: c.FromKey, ToKey: c.ToKey},
		LookupSize: c.LookupSize,
		Sample:     c.Sample,
		Heal:       c.Heal,
		Pace:       pace,
		Logger:     env.Logger,
	})
	if err != nil {
		if res != nil && res.Checked > 0 && !c.JSON {
			fmt.Fprintf(env.Stdout, "%s: %d keys checked before it stopped; run the same command again to go on from there\n", runName(res), res.Checked)
		}
		return err
	}
	if err := c.print(env.Stdout, res); err != nil {
		return err
	}
	if res.Drifted() > 0 {
		return &exitStatus{code: exitDrift}
	}
	return nil
}

// build returns the source, the reader of its destination, the
// destination's rate limit and burst, and its name.
func (c *VerifyCmd) build(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (verify.Source, verify.Reader, float64, int, string, error) {
	r := verify.Range{FromKey: c.FromKey, ToKey: c.ToKey}
	if c.Source == jobs.Resources {
		src, err := verify.NewResources(r)
		if err != nil {
			return nil, nil, 0, 0, "", usagef("--from-key/--to-key: %v", err)
		}
		if c.ThirdpartyURL == "" {
			return nil, nil, 0, 0, "", usagef("--thirdparty-url (SYNCER_THIRDPARTY_URL) is required to verify resources")
		}
		client, err := verify.NewClient(c.ThirdpartyURL, c.ThirdpartyToken)
		if err != nil {
			return nil, nil, 0, 0, "", usagef("--thirdparty-url (SYNCER_THIRDPARTY_URL): %v", err)
		}
		rd, err := reader(c.ThirdpartyFormat, nil, client, "resources", c.Source)
		if err != nil {
			return nil, nil, 0, 0, "", err
		}
		return src, rd, c.RateLimit, c.RateBurst, metrics.DefaultDestination, nil
	}
	cfg, err := c.ConfigFile.Load(true)
	if err != nil {
		return nil, nil, 0, 0, "", err
	}
	if cfg == nil {
		return nil, nil, 0, 0, "", usagef("--source %s: a configured source needs --config (SYNCER_CONFIG)", c.Source)
	}
	dest, err := destinationOf(cfg, c.Source)
	if err != nil {
		return nil, nil, 0, 0, "", err
	}
	src, err := c.configuredSource(ctx, pool, r, dest)
	if err != nil {
		return nil, nil, 0, 0, "", err
	}
	// The destination's own client, as the daemons build it: its token or
	// auth mapping (bearer, basic, OAuth2 client credentials), its headers
	// and its TLS.
	creds := credentials.NewSet(logger)
	tcfg, err := daemon.ThirdPartyConfig(pool, creds, logger, dest)
	if err != nil {
		return nil, nil, 0, 0, "", fmt.Errorf("destination %s: %w", dest.Name, err)
	}
	tcfg.Timeout = verify.LookupTimeoutDefault
	var client *thirdparty.Client
	var columns map[string]any
	if c.Tenant != "" {
		client, columns, err = c.tenantClient(ctx, pool, creds, logger, dest, tcfg, c.Tenant)
	} else {
		client, err = thirdparty.New(tcfg)
	}
	if err != nil {
		return nil, nil, 0, 0, "", fmt.Errorf("destination %s: %w", dest.Name, err)
	}
	rd, err := reader(dest.Format.Name, dest.Verify, client, dest.Name, c.Source)
	if err != nil {
		return nil, nil, 0, 0, "", err
	}
	if cr, ok := rd.(*verify.CustomReader); ok && c.Tenant != "" {
		// The block's programs see the tenant as its deliverer's do.
		cr.Verify = cr.Verify.ForTenant(c.Tenant, columns)
	}
	limit, burst := c.RateLimit, c.RateBurst
	if dest.RateLimit != nil {
		limit = *dest.RateLimit
	}
	if dest.RateBurst > 0 {
		burst = dest.RateBurst
	}
	return src, rd, limit, burst, dest.Name, nil
}

// destinationOf returns the destination of the configured source name.
func destinationOf(cfg *config.Config, name string) (*config.Destination, error) {
	var names []string
	for _, s := range cfg.Sources {
		if s.Name != name {
			names = append(names, s.Name)
			continue
		}
		d := cfg.Destination(s.Destination)
		if d == nil {
			return nil, usagef("--source %s: its destination %s is not in --config", name, s.Destination)
		}
		return d, nil
	}
	return nil, usagef("--source: no source %s in --config (sources: %s)", name, strings.Join(append(names, jobs.Resources), ", "))
}

// reader returns verify.NewReader's reader of destination dest, or a
// usage error naming it.
func reader(format string, block *custom.VerifyConfig, client verify.Sender, dest, source string) (verify.Reader, error) {
	rd, err := verify.NewReader(format, block, client, source)
	switch {
	case errors.Is(err, verify.ErrNoReadAPI):
		return nil, usagef("destination %s: %v (docs/protocol.md, Verify and heal; recipes in docs/destinations.md)", dest, err)
	case err != nil:
		// config check refuses a block that cannot work first: the file
		// changed since.
		return nil, usagef("destination %s: %v", dest, err)
	}
	return rd, nil
}

// print writes the counts and examples, as text or JSON.
func (c *VerifyCmd) print(w io.Writer, res *verify.Result) error {
	if c.JSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if res.Resumed {
		fmt.Fprintf(w, "%s: resumed the interrupted verify\n", runName(res))
	}
	fmt.Fprintf(w, "%s: %d keys checked: %d ok, %d missing, %d stale, %d zombie, %d failed, %d unknown, %d pending\n",
		runName(res), res.Checked, res.OK, res.Missing, res.Stale, res.Zombie, res.Failed, res.Unknown, res.Pending)
	for _, ex := range res.Examples {
		tenant := ""
		if ex.Tenant != "" && res.Tenant == "" {
			tenant = " (tenant " + ex.Tenant + ")"
		}
		fmt.Fprintf(w, "  %s %s%s: here %s, there %s\n", ex.Kind, ex.ID, tenant, ex.Here, ex.There)
	}
	switch {
	case res.Drifted() == 0:
		fmt.Fprintf(w, "nothing drifted\n")
	case c.Heal:
		fmt.Fprintf(w, "%d drifted keys are pending again: the running daemons send them\n", res.Healed)
	default:
		tenant := ""
		if res.Tenant != "" {
			tenant = " --tenant " + res.Tenant
		}
		fmt.Fprintf(w, "%d keys drifted: syncer verify --source %s%s --heal makes them pending again\n", res.Drifted(), res.Source, tenant)
	}
	if res.Failed > 0 {
		fmt.Fprintf(w, "%d keys failed (the third party rejected their latest version): --heal leaves them, since they would be rejected again; fix the cause, then %s\n",
			res.Failed, retryFailedCommand(res))
	}
	return nil
}

// retryFailedCommand is the command that sends res's failed keys again.
func retryFailedCommand(res *verify.Result) string {
	if res.Source == jobs.Resources {
		return "syncer retry-failed"
	}
	cmd := "syncer retry-failed --source " + res.Source
	if res.Tenant != "" {
		cmd += " --tenant " + res.Tenant
	}
	return cmd
}

// configuredSource returns the installed configured source as a
// verify.Source.
func (c *VerifyCmd) configuredSource(ctx context.Context, pool *pgxpool.Pool, r verify.Range, dest *config.Destination) (verify.Source, error) {
	src, err := installedSource(ctx, pool, c.Source)
	if err != nil {
		var nse *operator.NoSourceError
		if errors.As(err, &nse) {
			return nil, usagef("--source: %v", strings.TrimPrefix(err.Error(), "retry failed keys: "))
		}
		return nil, err
	}
	switch {
	case c.Tenant != "" && src.Tenant == "":
		return nil, usagef("--tenant %s: source %s has no tenants (no tenant column)", c.Tenant, src.Name)
	case c.Tenant == "" && src.Tenant != "" && dest.Tenants != nil:
		// Each tenant's rows are in its own account: no one client reads
		// them all.
		return nil, usagef("source %s sends each tenant to its own account (destination %s has a tenants block): verify one tenant with --tenant T", src.Name, dest.Name)
	}
	var out *verify.Configured
	if c.Tenant != "" {
		out, err = verify.NewConfiguredTenant(src, c.Tenant, r)
	} else {
		out, err = verify.NewConfigured(src, r)
	}
	if err != nil {
		return nil, usagef("--from-key/--to-key of source %s (its key is %s): %v", src.Name, src.KeyType, err)
	}
	return out, nil
}

// runName names what a run verified in its output: "source S", or
// "source S tenant T".
func runName(res *verify.Result) string {
	if res.Tenant != "" {
		return "source " + res.Source + " tenant " + res.Tenant
	}
	return "source " + res.Source
}

// closeRegistries closes the run's tenants registries.
func (c *VerifyCmd) closeRegistries() {
	for _, reg := range c.registries {
		reg.Close()
	}
	c.registries = nil
}

// tenantClient is a client of tenant's account, and the extra columns of
// its connection row (for a verify block's $tenant), from its destination's
// tenants (its connection row's URL and credentials, when the destination
// has a tenants block; the destination's, with {tenant} in its URL, when
// not). Its errors name the tenant, never a credential.
func (c *VerifyCmd) tenantClient(ctx context.Context, pool *pgxpool.Pool, creds *credentials.Set, logger *slog.Logger, dest *config.Destination, tcfg *thirdparty.Config, tenant string) (*thirdparty.Client, map[string]any, error) {
	reg, err := daemon.TenantRegistry(pool, creds, logger, dest, tcfg)
	if err != nil {
		return nil, nil, err
	}
	c.registries = append(c.registries, reg)
	client, columns, err := reg.Account(ctx, tenant)
	if errors.Is(err, tenants.ErrUnconnected) {
		return nil, nil, noAccount{usagef("destination %s: tenant %s has no connection row (its tenants.query gives none): nothing to read it with", dest.Name, tenant)}
	}
	if errors.Is(err, tenants.ErrRefreshNotShared) {
		return nil, nil, usagef("%v", err)
	}
	return client, columns, err
}
