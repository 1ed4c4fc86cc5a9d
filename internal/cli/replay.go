package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"

	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// Defaults of replay's hidden flags.
const (
	// replayPollDefault is how often --wait reads the progress.
	replayPollDefault = 500 * time.Millisecond
	// replayStallDefault is how long --wait sees no progress before it says
	// that no daemon seems to work on the replay: a daemon that runs takes
	// a new replay within a second or two (the relay's poll is 2 s).
	replayStallDefault = 5 * time.Second
)

// ReplayCmd is `syncer replay`.
type ReplayCmd struct {
	DB
	ConfigFile
	FromID  int64         `name:"from-id" help:"First id of resources' range (inclusive)."`
	ToID    int64         `name:"to-id" help:"Last id of resources' range (inclusive)."`
	FromKey string        `name:"from-key" placeholder:"KEY" help:"With --source: first key of the range (inclusive), in the key's text form; integer keys compare as numbers, text and uuid keys in byte order."`
	ToKey   string        `name:"to-key" placeholder:"KEY" help:"With --source: last key of the range (inclusive)."`
	Since   string        `name:"since" help:"Rows created at or after this time (RFC 3339); with --source, rows whose last change (the source's changed_at column) is at or after it."`
	Until   string        `name:"until" help:"Rows created before this time (RFC 3339); with --source, rows last changed before it."`
	Failed  bool          `name:"failed" help:"Only rows whose current version failed."`
	DryRun  bool          `name:"dry-run" help:"Print how many rows the replay would send, and send nothing."`
	Wait    bool          `name:"wait" help:"Follow the replay's progress until it is done."`
	List    bool          `name:"list" help:"List the replays with their state and progress, and create none."`
	Cancel  int64         `name:"cancel" placeholder:"ID" help:"Cancel replay ID: nothing more of it is sent."`
	Source  string        `name:"source" placeholder:"NAME" help:"Replay source NAME: every row, or those of --from-key/--to-key and --since/--until, once more (resources: as without --source, its keys are ids)."`
	Tenant  tenant.Tenant `name:"tenant" placeholder:"VALUE" help:"With --source (a source with a tenant column): only the rows of this tenant."`

	Poll  time.Duration `name:"poll" default:"${replay_poll}" hidden:""`
	Stall time.Duration `name:"stall" default:"${replay_stall}" hidden:""`

	// req is the replay asked for, once Validate checked the flags: the
	// one request of the replay model (operator.PlanReplay) for resources
	// and a configured source alike.
	req replays.Request
}

// ofResources reports whether the replay is of resources: without
// --source, or --source resources.
func (c *ReplayCmd) ofResources() bool {
	return c.Source == "" || rows.KindOf(c.Source) == rows.Resources
}

func (c *ReplayCmd) hasRange() bool {
	return c.FromID != 0 || c.ToID != 0 || c.Since != "" || c.Until != "" || c.Failed
}

// Validate checks the range, or that --list and --cancel come alone.
func (c *ReplayCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if err := positive(c, "Poll", "Stall"); err != nil {
		return err
	}
	switch {
	case c.Tenant != "" && c.ofResources():
		return usagef("--tenant names a tenant of a source with a tenant column: give --source NAME")
	case c.Source != "" && (c.List || c.Cancel != 0):
		return usagef("--source creates a replay: --list and --cancel ID come alone")
	case !c.ofResources():
		return c.validateSource()
	case c.Source == "" && (c.FromKey != "" || c.ToKey != ""):
		return usagef("--from-key and --to-key name keys of a configured source: give --source NAME (for resources, --from-id and --to-id)")
	case c.List && c.Cancel != 0:
		return usagef("--list and --cancel are exclusive")
	case (c.List || c.Cancel != 0) && (c.hasRange() || c.DryRun || c.Wait):
		return usagef("--list and --cancel take no range, --dry-run or --wait")
	case c.Cancel < 0:
		return usagef("--cancel takes a replay id (see --list), got %d", c.Cancel)
	case c.List || c.Cancel != 0:
		return nil
	}
	f := resources.Filter{FromID: c.FromID, ToID: c.ToID, FailedOnly: c.Failed}
	if c.FromID != 0 && c.ToID != 0 && c.FromID > c.ToID {
		return usagef("--from-id %d is after --to-id %d", c.FromID, c.ToID)
	}
	var err error
	if f.Since, f.Until, err = c.timeRange(); err != nil {
		return err
	}
	if c.Source == "" && !c.hasRange() {
		// --source resources alone is the whole table, as for any source.
		return usagef("replay needs a range (--from-id/--to-id, --since/--until or --failed), --list or --cancel ID")
	}
	c.req = replays.Request{Source: rows.ResourcesName, Filter: f, Range: replays.SourceRange{FromKey: c.FromKey, ToKey: c.ToKey}}
	return nil
}

// validateSource checks the flags of a configured source's replay: a flag
// that names rows of resources, or that a source's replay does not take,
// is refused, never reinterpreted.
func (c *ReplayCmd) validateSource() error {
	switch {
	case c.FromID != 0 || c.ToID != 0:
		return usagef("--from-id and --to-id name rows of resources: with --source use --from-key and --to-key")
	case c.Failed:
		return usagef("--failed does not apply to --source: use syncer retry-failed --source %s", c.Source)
	}
	r := replays.SourceRange{FromKey: c.FromKey, ToKey: c.ToKey, Tenant: c.Tenant}
	var err error
	if r.Since, r.Until, err = c.timeRange(); err != nil {
		return err
	}
	c.req = replays.Request{Source: c.Source, Range: r}
	return nil
}

// Run creates, lists or cancels replays, through the replay model
// (operator, internal/replays) that the console uses too.
func (c *ReplayCmd) Run(ctx context.Context, env *Env) error {
	pool, err := c.openMigrated(ctx, "syncer replay")
	if err != nil {
		return err
	}
	defer pool.Close()
	switch {
	case c.List:
		return listReplays(ctx, env.Stdout, pool)
	case c.Cancel != 0:
		if err := operator.CancelReplay(ctx, pool, c.Cancel); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "replay %d cancelled: daemons send nothing more of it\n", c.Cancel)
		return nil
	}
	return c.create(ctx, env, pool)
}

// create plans the replay (the dry run stops there), starts it (recorded
// and its source's job woken in one transaction: the relay runs it) and
// follows it if asked.
func (c *ReplayCmd) create(ctx context.Context, env *Env, pool *pgxpool.Pool) error {
	req := c.req
	if !c.ofResources() && (!req.Range.Since.IsZero() || !req.Range.Until.IsZero()) {
		// The time of a row's last change is the application's column:
		// syncer keeps none per row.
		cfg, err := c.ConfigFile.Load(false)
		if err != nil {
			return err
		}
		if cfg != nil && cfg.Source(c.Source) != nil {
			req.Range.ChangedColumn = cfg.Source(c.Source).ChangedAt
		}
		if req.Range.ChangedColumn == "" {
			return usagef("--since and --until with --source select rows by the time of their last change: name that column as changed_at of source %s in --config (SYNCER_CONFIG)", c.Source)
		}
	}
	if c.Tenant != "" {
		if err := checkSourceTenant(ctx, pool, &c.ConfigFile, c.Source, c.Tenant); err != nil {
			return c.planError(ctx, pool, err)
		}
	}
	plan, err := operator.PlanReplay(ctx, pool, req)
	if err != nil {
		return c.planError(ctx, pool, err)
	}
	unit := plan.Unit()
	of := ""
	if !c.ofResources() {
		of = " of source " + plan.Source
	}
	if c.Tenant != "" {
		of += " tenant " + c.Tenant.String()
	}
	if c.DryRun {
		fmt.Fprintf(env.Stdout, "would send %d %s%s\n", plan.Count, unit, of)
		return nil
	}
	id, err := plan.Start(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "replay %d created: %d %s%s; running daemons will send them\n", id, plan.Count, unit, of)
	if !c.Wait {
		return nil
	}
	return c.follow(ctx, env, pool, id, plan.Count, unit)
}

// planError says why the replay's plan was refused: an unknown source or
// a range the source cannot take is the flags' fault (exit 2).
func (c *ReplayCmd) planError(ctx context.Context, pool *pgxpool.Pool, err error) error {
	var unknown *operator.UnknownTenantError
	if errors.As(err, &unknown) {
		return usagef("--tenant: %v", err)
	}
	var none *operator.NoSourceError
	if !errors.As(err, &none) && !errors.Is(err, sources.ErrBadKey) && !errors.Is(err, replays.ErrBadRange) {
		return err
	}
	all, lerr := sources.Load(ctx, pool)
	if lerr != nil {
		return lerr
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
		if s.Name == c.Source && errors.Is(err, sources.ErrBadKey) {
			return usagef("--from-key/--to-key of source %s (its key is %s): %v", s.Name, s.KeyType, strings.TrimSuffix(err.Error(), ": "+sources.ErrBadKey.Error()))
		}
	}
	if none != nil {
		return usagef("--source: no source %s is installed (installed: %s)", c.Source, strings.Join(names, ", "))
	}
	return usagef("%v", strings.TrimSuffix(err.Error(), ": "+replays.ErrBadRange.Error()))
}

// listReplays prints every replay with its progress.
func listReplays(ctx context.Context, w io.Writer, pool *pgxpool.Pool) error {
	all, err := operator.ListReplays(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tRANGE\tPROGRESS\tCREATED")
	for _, p := range all {
		if p.Source != "" {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d of %d keys sent (%d queued)\t%s\n",
				p.ID, p.ShownState(), describeSourceRange(p.Source, p.Range), p.Sent, p.TotalRows, p.Queued, p.CreatedAt.Format(time.RFC3339))
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d of %d rows (%.1f%%)\t%s\n",
			p.ID, p.State, describeFilter(p.Filter), p.Sent, p.TotalRows, p.Percent(), p.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

// describeFilter writes a replay's range as the flags that made it.
func describeFilter(f resources.Filter) string {
	var parts []string
	switch {
	case f.FromID != 0 && f.ToID != 0:
		parts = append(parts, fmt.Sprintf("ids %d-%d", f.FromID, f.ToID))
	case f.FromID != 0:
		parts = append(parts, fmt.Sprintf("ids from %d", f.FromID))
	case f.ToID != 0:
		parts = append(parts, fmt.Sprintf("ids to %d", f.ToID))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since "+f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "until "+f.Until.UTC().Format(time.RFC3339))
	}
	if f.FailedOnly {
		parts = append(parts, "failed only")
	}
	if len(parts) == 0 {
		return "all rows"
	}
	return strings.Join(parts, ", ")
}

// endLine is the line --wait ends with once nothing of the replay is left
// to send, and detail what it adds to a progress line ("" for none).
func endLine(p replays.Progress) (end, detail string) {
	if p.Source != "" {
		detail = fmt.Sprintf(" (%d queued)", p.Queued)
		if p.Over {
			end = fmt.Sprintf("replay %d done: %d keys sent", p.ID, p.Queued)
		}
		return end, detail
	}
	if p.Over {
		end = fmt.Sprintf("replay %d done: %d rows sent, %d failed", p.ID, p.Sent-p.Failed, p.Failed)
	}
	return end, ""
}

// progressState is the state a progress line names: the model's shown
// state, "sending" until the last key of a source's replay is sent (end
// is then said), as replay --list and status name it.
func progressState(p replays.Progress, end string) string {
	if end == "" && p.State == replays.StateDone {
		return string(replays.StateSending)
	}
	return string(p.ShownState())
}

// follow shows a replay's progress, read by read, until it is finished: a
// progress bar on a terminal, a plain line every few seconds otherwise.
// unit names what total counts (rows, keys). When nothing moves for Stall,
// it says that no daemon seems to work on the replay, once per stall, and
// keeps waiting: starting a daemon is all it takes. It reads the replay
// model's progress, which the console shows too.
func (c *ReplayCmd) follow(ctx context.Context, env *Env, pool *pgxpool.Pool, id, total int64, unit string) error {
	var bar *progressbar.ProgressBar
	if env.IsTerminal {
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(env.Stdout),
			progressbar.OptionSetDescription(fmt.Sprintf("replay %d", id)),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(unit),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
		)
	}
	start := time.Now()
	lastLine := time.Time{}
	stall := newStallWatch(c.Stall)
	t := time.NewTicker(c.Poll)
	defer t.Stop()
	for {
		p, err := operator.ReplayProgress(ctx, pool, id)
		if err != nil {
			return err
		}
		end, detail := endLine(p)
		if bar != nil {
			_ = bar.Set64(min(p.Sent, total))
		} else if time.Since(lastLine) >= 2*time.Second || end != "" || p.State == replays.StateCancelled {
			lastLine = time.Now()
			rate := float64(p.Sent) / max(time.Since(start).Seconds(), 0.001)
			eta := "?"
			if p.Sent >= total || end != "" {
				eta = "0s"
			} else if rate > 0 {
				eta = (time.Duration(float64(total-p.Sent)/rate) * time.Second).Round(time.Second).String()
			}
			fmt.Fprintf(env.Stdout, "replay %d: %s, %d of %d %s sent%s, %.0f %s/s, eta %s\n", id, progressState(p, end), p.Sent, total, unit, detail, rate, unit, eta)
		}
		switch {
		case end != "":
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(env.Stdout)
			}
			fmt.Fprintln(env.Stdout, end)
			return nil
		case p.State == replays.StateCancelled:
			return fmt.Errorf("replay %d was cancelled after %d of %d %s", id, p.Sent, total, unit)
		}
		if stall.stalled(p.State, p.Sent) {
			if bar != nil {
				fmt.Fprintln(env.Stdout)
			}
			what := "no daemon has picked the replay up"
			if p.State == replays.StateRunning {
				what = "the replay has not moved"
			}
			fmt.Fprintf(env.Stdout, "replay %d: %s in %s: is `syncer run` running? Still waiting (Ctrl-C stops waiting, not the replay)\n",
				id, what, durationText(c.Stall))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// timeRange parses --since and --until (RFC 3339), which a replay of
// resources and one of a source read alike; zero is unbounded.
func (c *ReplayCmd) timeRange() (since, until time.Time, err error) {
	if c.Since != "" {
		if since, err = time.Parse(time.RFC3339, c.Since); err != nil {
			return since, until, usagef("--since must be an RFC 3339 time, got %q", c.Since)
		}
	}
	if c.Until != "" {
		if until, err = time.Parse(time.RFC3339, c.Until); err != nil {
			return since, until, usagef("--until must be an RFC 3339 time, got %q", c.Until)
		}
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return since, until, usagef("--since must be before --until")
	}
	return since, until, nil
}

// stallWatch tells when a followed replay has not moved (neither its state
// nor its progress) for a while: once per stall, so `--wait` says so once
// and keeps waiting.
type stallWatch struct {
	after    time.Duration
	state    replays.State
	progress int64
	moved    time.Time
	warned   bool
}

func newStallWatch(after time.Duration) *stallWatch {
	return &stallWatch{progress: -1, moved: time.Now(), after: after}
}

// stalled records what the replay shows now and reports whether a stall
// is to be said.
func (w *stallWatch) stalled(state replays.State, progress int64) bool {
	if state != w.state || progress != w.progress {
		w.state, w.progress, w.moved, w.warned = state, progress, time.Now(), false
	}
	if w.warned || time.Since(w.moved) < w.after {
		return false
	}
	w.warned = true
	return true
}

// describeSourceRange writes a source replay's range as the flags that
// made it.
func describeSourceRange(src string, r replays.SourceRange) string {
	parts := []string{"source " + src}
	if r.Tenant != "" {
		parts = append(parts, "tenant "+r.Tenant.String())
	}
	bounds := len(parts)
	switch {
	case r.FromKey != "" && r.ToKey != "":
		parts = append(parts, fmt.Sprintf("keys %s to %s", r.FromKey, r.ToKey))
	case r.FromKey != "":
		parts = append(parts, "keys from "+r.FromKey)
	case r.ToKey != "":
		parts = append(parts, "keys to "+r.ToKey)
	}
	if !r.Since.IsZero() {
		parts = append(parts, "changed since "+r.Since.UTC().Format(time.RFC3339))
	}
	if !r.Until.IsZero() {
		parts = append(parts, "changed until "+r.Until.UTC().Format(time.RFC3339))
	}
	switch {
	case len(parts) > bounds:
	case r.Tenant != "":
		parts = append(parts, "all its rows")
	default:
		parts = append(parts, "all rows")
	}
	return strings.Join(parts, ", ")
}
