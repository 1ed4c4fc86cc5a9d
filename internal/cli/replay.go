package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/schollz/progressbar/v3"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
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
	FromID  int64  `name:"from-id" help:"First id of resources' range (inclusive)."`
	ToID    int64  `name:"to-id" help:"Last id of resources' range (inclusive)."`
	FromKey string `name:"from-key" placeholder:"KEY" help:"With --source: first key of the range (inclusive), in the key's text form; integer keys compare as numbers, text and uuid keys in byte order."`
	ToKey   string `name:"to-key" placeholder:"KEY" help:"With --source: last key of the range (inclusive)."`
	Since   string `name:"since" help:"Rows created at or after this time (RFC 3339); with --source, rows whose last change (the source's changed_at column) is at or after it."`
	Until   string `name:"until" help:"Rows created before this time (RFC 3339); with --source, rows last changed before it."`
	Failed  bool   `name:"failed" help:"Only rows whose current version failed."`
	DryRun  bool   `name:"dry-run" help:"Print how many rows the replay would send, and send nothing."`
	Wait    bool   `name:"wait" help:"Follow the replay's progress until it is done."`
	List    bool   `name:"list" help:"List the replays with their state and progress, and create none."`
	Cancel  int64  `name:"cancel" placeholder:"ID" help:"Cancel replay ID: nothing more of it is sent."`
	Source  string `name:"source" placeholder:"NAME" help:"Replay configured source NAME: every row, or those of --from-key/--to-key and --since/--until, once more."`

	Poll  time.Duration `name:"poll" default:"${replay_poll}" hidden:""`
	Stall time.Duration `name:"stall" default:"${replay_stall}" hidden:""`

	filter resources.Filter
	rng    sources.ReplayRange
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
	case c.Source != "" && (c.List || c.Cancel != 0):
		return usagef("--source creates a replay: --list and --cancel ID come alone")
	case c.Source != "":
		return c.validateSource()
	case c.FromKey != "" || c.ToKey != "":
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
	if !c.hasRange() {
		return usagef("replay needs a range (--from-id/--to-id, --since/--until or --failed), --list or --cancel ID")
	}
	c.filter = f
	return nil
}

// Run creates, lists or cancels replays.
func (c *ReplayCmd) Run(ctx context.Context, env *Env) error {
	pool, err := c.openMigrated(ctx, "syncer replay")
	if err != nil {
		return err
	}
	defer pool.Close()
	switch {
	case c.Source != "":
		return c.createSource(ctx, env, pool)
	case c.List:
		return listReplays(ctx, env.Stdout, pool)
	case c.Cancel != 0:
		if err := replays.Cancel(ctx, pool, c.Cancel); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "replay %d cancelled: daemons send nothing more of it\n", c.Cancel)
		return nil
	}
	return c.create(ctx, env, pool)
}

// create records the replay and its River job in one transaction, so a
// replay never exists without a job to run it, and follows it if asked.
func (c *ReplayCmd) create(ctx context.Context, env *Env, pool *pgxpool.Pool) error {
	n, err := resources.Count(ctx, pool, c.filter)
	if err != nil {
		return err
	}
	if c.DryRun {
		fmt.Fprintf(env.Stdout, "would send %d rows\n", n)
		return nil
	}
	if n == 0 {
		return errors.New("no row matches the range: nothing to replay, no replay created")
	}
	schema, err := database.CurrentSchema(ctx, pool)
	if err != nil {
		return err
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	var id int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if id, err = replays.Enqueue(ctx, tx, rc, c.filter, n); err != nil {
			return err
		}
		// Resources' job, lingering in a daemon, runs the replay now.
		return outbox.Wake(ctx, tx, jobs.Resources)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "replay %d created: %d rows; running daemons will send them\n", id, n)
	if !c.Wait {
		return nil
	}
	return c.follow(ctx, env, id, n, "rows", rowsProgress(pool, id))
}

// listReplays prints every replay with its progress.
func listReplays(ctx context.Context, w io.Writer, pool *pgxpool.Pool) error {
	all, err := replays.List(ctx, pool)
	if err != nil {
		return err
	}
	done, err := replayProgress(ctx, pool)
	if err != nil {
		return err
	}
	ofSources, err := sources.Replays(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tRANGE\tPROGRESS\tCREATED")
	for _, r := range all {
		if r.Source != "" {
			info := ofSources[r.ID]
			sent := max(info.KeysLogged-info.Unsent, 0)
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d of %d keys sent (%d queued)\t%s\n",
				r.ID, r.State, describeSourceRange(r.Source, info.Range), sent, r.TotalRows, info.KeysLogged, r.CreatedAt.Format(time.RFC3339))
			continue
		}
		d := done[checkpoint.Replay(r.ID)]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d of %d rows (%.1f%%)\t%s\n",
			r.ID, r.State, describeFilter(r.Filter), d, r.TotalRows, r.Percent(d), r.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

// replayProgress returns the rows each checkpoint sent or failed, by name.
func replayProgress(ctx context.Context, pool *pgxpool.Pool) (map[string]int64, error) {
	cps, err := checkpoint.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	done := make(map[string]int64, len(cps))
	for _, cp := range cps {
		done[cp.Name] = cp.RowsDone + cp.RowsFailed
	}
	return done, nil
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

// progress is a followed replay at one reading: its state, the rows or
// keys sent so far (rejected ones included), and the line it ends with
// once finished ("" while it is not).
type progress struct {
	state replays.State
	done  int64
	// detail says more than done of total (keys a source's replay has
	// queued so far); "" for none.
	detail string
	end    string
}

// follow shows a replay's progress, read by read, until it is finished: a
// progress bar on a terminal, a plain line every few seconds otherwise.
// unit names what total counts (rows, keys). When nothing moves for Stall,
// it says that no daemon seems to work on the replay, once per stall, and
// keeps waiting: starting a daemon is all it takes. A replay of resources
// and one of a source differ only in read.
func (c *ReplayCmd) follow(ctx context.Context, env *Env, id, total int64, unit string, read func(context.Context) (progress, error)) error {
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
		p, err := read(ctx)
		if err != nil {
			return err
		}
		if bar != nil {
			_ = bar.Set64(min(p.done, total))
		} else if time.Since(lastLine) >= 2*time.Second || p.end != "" || p.state.Finished() {
			lastLine = time.Now()
			rate := float64(p.done) / max(time.Since(start).Seconds(), 0.001)
			eta := "?"
			if p.done >= total || p.end != "" {
				eta = "0s"
			} else if rate > 0 {
				eta = (time.Duration(float64(total-p.done)/rate) * time.Second).Round(time.Second).String()
			}
			fmt.Fprintf(env.Stdout, "replay %d: %s, %d of %d %s sent%s, %.0f %s/s, eta %s\n", id, p.state, p.done, total, unit, p.detail, rate, unit, eta)
		}
		switch {
		case p.end != "":
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(env.Stdout)
			}
			fmt.Fprintln(env.Stdout, p.end)
			return nil
		case p.state == replays.StateCancelled:
			return fmt.Errorf("replay %d was cancelled after %d of %d %s", id, p.done, total, unit)
		}
		if stall.stalled(p.state, p.done) {
			if bar != nil {
				fmt.Fprintln(env.Stdout)
			}
			what := "no daemon has picked the replay up"
			if p.state == replays.StateRunning {
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

// rowsProgress reads a replay of resources: its checkpoint counts rows.
func rowsProgress(pool *pgxpool.Pool, id int64) func(context.Context) (progress, error) {
	return func(ctx context.Context) (progress, error) {
		state, err := replays.StateOf(ctx, pool, id)
		if err != nil {
			return progress{}, err
		}
		cp, err := checkpoint.Get(ctx, pool, checkpoint.Replay(id))
		if err != nil {
			return progress{}, err
		}
		p := progress{state: state, done: cp.RowsDone + cp.RowsFailed}
		if state == replays.StateDone {
			p.end = fmt.Sprintf("replay %d done: %d rows sent, %d failed", id, cp.RowsDone, cp.RowsFailed)
		}
		return p, nil
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
