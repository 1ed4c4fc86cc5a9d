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
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/tenants"
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
	Source     string        `name:"source" required:"" placeholder:"NAME" help:"The source to verify: resources, or a configured source (with --config)."`
	Tenant     tenant.Tenant `name:"tenant" placeholder:"T" help:"Only this tenant's keys, read with its account's credentials (sources with tenants only)."`
	FromKey    string        `name:"from-key" placeholder:"K" help:"First key to check (inclusive); the first key when absent."`
	ToKey      string        `name:"to-key" placeholder:"K" help:"Last key to check (inclusive); the last key when absent."`
	Sample     float64       `name:"sample" default:"1" help:"Share of the keys checked, drawn at random (above 0, at most 1): 0.05 checks one key in twenty."`
	Heal       bool          `name:"heal" help:"Make each drifted key pending again as a new version (a tombstone for a zombie): the running daemons send them. Nothing is sent by verify itself."`
	JSON       bool          `name:"json" help:"Print the result as one JSON object."`
	LookupSize int           `name:"lookup-size" default:"${lookup_size}" help:"Ids asked for in one lookup, at most."`

	// The destination of resources, as syncer run takes it.
	ThirdpartyURL    string  `name:"thirdparty-url" env:"SYNCER_THIRDPARTY_URL" help:"Base URL of the third-party API of resources (lookups go to URL/v1/lookup)."`
	ThirdpartyToken  string  `name:"thirdparty-token" env:"SYNCER_THIRDPARTY_TOKEN" help:"Bearer token sent to the third party, if set; set it in the environment. Never logged."`
	ThirdpartyFormat string  `name:"thirdparty-format" env:"SYNCER_THIRDPARTY_FORMAT" default:"syncer" help:"Format of the resources destination: syncer or elasticsearch have a read API."`
	RateLimit        float64 `name:"rate-limit" env:"SYNCER_RATE_LIMIT" default:"0" help:"Requests a second to the third party, as the daemons are given it; verify takes a quarter of it while rows are pending. 0 means no limit."`
	RateBurst        int     `name:"rate-burst" env:"SYNCER_RATE_BURST" default:"${rate_burst}" help:"Burst of the rate limit."`
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
	rs, err := c.open(ctx, pool)
	if err != nil {
		return err
	}
	if et, err := c.everyTenantOf(rs); err != nil {
		return err
	} else if et != nil {
		return c.runEveryTenant(ctx, env, pool, et)
	}
	b, err := c.build(ctx, pool, env.Logger, rs)
	if err != nil {
		return err
	}
	defer b.close()
	src, rd, limit, burst, dest := b.src, b.rd, b.limit, b.burst, b.dest
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
	return c.report(env.Stdout, res, err, c.print)
}

// report prints a run's result res with print and returns verify's exit:
// after a run that failed with err, what it checked before it stopped,
// and err; an exitStatus of 3 when something drifted.
func (c *VerifyCmd) report(w io.Writer, res *verify.Result, err error, print func(io.Writer, *verify.Result) error) error {
	if err != nil {
		if res != nil && res.Checked > 0 && !c.JSON {
			fmt.Fprintf(w, "%s: %d keys checked before it stopped; run the same command again to go on from there\n", runName(res.Source, res.Tenant), res.Checked)
		}
		return err
	}
	if err := print(w, res); err != nil {
		return err
	}
	if res.Drifted() > 0 {
		return &exitStatus{code: exitDrift}
	}
	return nil
}

// built is what a run of one source (or one tenant) reads: the source,
// the reader of its destination, the destination's rate limit and burst,
// and its name; close frees the reader's accounts.
type built struct {
	src   verify.Source
	rd    verify.Reader
	limit float64
	burst int
	dest  string
	close func()
}

// open returns the rows of --source (of --tenant), their kind decided by
// the seam; an unknown source or a tenant of a source without tenants is
// a usage error.
func (c *VerifyCmd) open(ctx context.Context, pool *pgxpool.Pool) (rows.Rows, error) {
	rs, err := openRows(ctx, pool, rows.Scope{Source: c.Source, Tenant: c.Tenant})
	var nse *operator.NoSourceError
	var nte *rows.NoTenantsError
	switch {
	case errors.As(err, &nse):
		return nil, usagef("--source: %v", strings.TrimPrefix(err.Error(), "retry failed keys: "))
	case errors.As(err, &nte):
		return nil, usagef("--tenant %s: source %s has no tenants (no tenant column)", c.Tenant, c.Source)
	}
	return rs, err
}

// verifySource is rs as a run over the flags' range reads it.
func (c *VerifyCmd) verifySource(rs rows.Rows) (verify.Source, error) {
	src, err := rs.Verify(verify.Range{FromKey: c.FromKey, ToKey: c.ToKey})
	if err != nil {
		return nil, usagef("--from-key/--to-key of source %s (its key is %s): %v", rs.Scope().Source, rs.KeyType(), err)
	}
	return src, nil
}

// build returns what a run of rs reads. The reader is the destination's:
// the default destination's is built from the flags (SYNCER_THIRDPARTY_*),
// as the daemons build it, any other from its block in --config.
func (c *VerifyCmd) build(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, rs rows.Rows) (*built, error) {
	src, err := c.verifySource(rs)
	if err != nil {
		return nil, err
	}
	if rs.Destination() == rows.ResourcesDestination {
		return c.buildDefault(src)
	}
	cfg, err := c.ConfigFile.Load(true)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, usagef("--source %s: a configured source needs --config (SYNCER_CONFIG)", c.Source)
	}
	dest, err := destinationOf(cfg, c.Source)
	if err != nil {
		return nil, err
	}
	if c.Tenant == "" && rs.Tenanted() && dest.Tenants != nil {
		// Each tenant's rows are in its own account: no one client reads
		// them all.
		return nil, usagef("source %s sends each tenant to its own account (destination %s has a tenants block): verify one tenant with --tenant T", c.Source, dest.Name)
	}
	// The destination's own accounts, as the daemons build them.
	acc, err := daemon.NewVerifyAccounts(pool, credentials.NewSet(logger), logger, dest)
	if err != nil {
		return nil, err
	}
	var rd verify.Reader
	if c.Tenant != "" {
		rd, err = tenantReader(ctx, acc, dest, c.Source, c.Tenant)
	} else if rd, err = acc.Reader(c.Source); err != nil {
		err = readerError(dest.Name, err)
	}
	if err != nil {
		acc.Close()
		return nil, err
	}
	limit, burst := c.destLimits(dest)
	return &built{src: src, rd: rd, limit: limit, burst: burst, dest: dest.Name, close: acc.Close}, nil
}

// buildDefault returns what a run of src reads from the default
// destination, which the flags describe.
func (c *VerifyCmd) buildDefault(src verify.Source) (*built, error) {
	if c.ThirdpartyURL == "" {
		return nil, usagef("--thirdparty-url (SYNCER_THIRDPARTY_URL) is required to verify %s", c.Source)
	}
	client, err := verify.NewClient(c.ThirdpartyURL, c.ThirdpartyToken)
	if err != nil {
		return nil, usagef("--thirdparty-url (SYNCER_THIRDPARTY_URL): %v", err)
	}
	rd, err := formats.Reader(c.ThirdpartyFormat, nil, &formats.Account{Client: client, Source: c.Source})
	if err != nil {
		client.Close()
		return nil, readerError(c.Source, err)
	}
	return &built{src: src, rd: rd, limit: c.RateLimit, burst: c.RateBurst, dest: rows.ResourcesDestination, close: client.Close}, nil
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
	return nil, usagef("--source: no source %s in --config (sources: %s)", name, strings.Join(append(names, rows.ResourcesName), ", "))
}

// readerError is err, building the reader of destination dest, as a
// usage error when the destination cannot be read back as configured.
func readerError(dest string, err error) error {
	var fe *formats.FieldError
	switch {
	case errors.Is(err, formats.ErrNoReadAPI):
		return usagef("destination %s: %v (docs/protocol.md, Verify and heal; recipes in docs/destinations.md)", dest, err)
	case errors.As(err, &fe):
		// config check refuses a block that cannot work first: the file
		// changed since.
		return usagef("destination %s: %v", dest, err)
	}
	return err
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
	printCounts(w, runName(res.Source, res.Tenant), res.Resumed, &res.KindCounts)
	for _, ex := range res.Examples {
		of := ""
		if ex.Tenant != "" && res.Tenant == "" {
			of = " (tenant " + ex.Tenant.String() + ")"
		}
		fmt.Fprintf(w, "  %s %s%s: here %s, there %s\n", ex.Kind, ex.ID, of, ex.Here, ex.There)
	}
	switch {
	case res.Drifted() == 0:
		fmt.Fprintf(w, "nothing drifted\n")
	case c.Heal:
		fmt.Fprintf(w, "%d drifted keys are pending again: the running daemons send them\n", res.Healed)
	default:
		of := ""
		if res.Tenant != "" {
			of = " --tenant " + res.Tenant.String()
		}
		fmt.Fprintf(w, "%d keys drifted: syncer verify --source %s%s --heal makes them pending again\n", res.Drifted(), res.Source, of)
	}
	if res.Failed > 0 {
		fmt.Fprintf(w, "%d keys failed (the third party rejected their latest version): --heal leaves them, since they would be rejected again; fix the cause, then %s\n",
			res.Failed, retryFailedCommand(res))
	}
	return nil
}

// retryFailedCommand is the command that sends res's failed keys again.
func retryFailedCommand(res *verify.Result) string {
	if res.Source == retryDefaultSource {
		return "syncer retry-failed"
	}
	cmd := "syncer retry-failed --source " + res.Source
	if res.Tenant != "" {
		cmd += " --tenant " + res.Tenant.String()
	}
	return cmd
}

// runName names what a run verified in its output: "source S", or
// "source S tenant T".
func runName(source string, t tenant.Tenant) string {
	if !t.IsZero() {
		return "source " + source + " tenant " + t.String()
	}
	return "source " + source
}

// printCounts writes what a run of name (runName) counted, after a line
// saying it resumed an interrupted one: a whole run's, or each tenant's
// of a run of every tenant.
func printCounts(w io.Writer, name string, resumed bool, k *verify.KindCounts) {
	if resumed {
		fmt.Fprintf(w, "%s: resumed the interrupted verify\n", name)
	}
	fmt.Fprintf(w, "%s: %d keys checked: %d ok, %d missing, %d stale, %d zombie, %d failed, %d unknown, %d pending\n",
		name, k.Checked, k.OK, k.Missing, k.Stale, k.Zombie, k.Failed, k.Unknown, k.Pending)
}

// tenantReader is the reader of tenant's account at dest
// (daemon.VerifyAccounts.TenantReader), its errors as verify says them:
// they name the tenant, never a credential.
func tenantReader(ctx context.Context, acc *daemon.VerifyAccounts, dest *config.Destination, source string, t tenant.Tenant) (verify.Reader, error) {
	rd, err := acc.TenantReader(ctx, source, t)
	switch {
	case errors.Is(err, tenants.ErrUnconnected):
		return nil, noAccount{usagef("destination %s: tenant %s has no connection row (its tenants.query gives none): nothing to read it with", dest.Name, t)}
	case errors.Is(err, tenants.ErrRefreshNotShared):
		return nil, usagef("%v", err)
	case err != nil:
		return nil, readerError(dest.Name, err)
	}
	return rd, nil
}
