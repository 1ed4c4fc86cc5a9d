package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/schollz/progressbar/v3"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/migrations"
)

// ReplayCmd is `syncer replay`.
type ReplayCmd struct {
	DB
	FromID int64         `name:"from-id" help:"First id of the range (inclusive)."`
	ToID   int64         `name:"to-id" help:"Last id of the range (inclusive)."`
	Since  string        `name:"since" help:"Rows created at or after this time (RFC 3339)."`
	Until  string        `name:"until" help:"Rows created before this time (RFC 3339)."`
	Failed bool          `name:"failed" help:"Only rows whose current version failed."`
	DryRun bool          `name:"dry-run" help:"Print how many rows the replay would send, and send nothing."`
	Wait   bool          `name:"wait" help:"Follow the replay's progress until it is done."`
	Poll   time.Duration `name:"poll" default:"500ms" hidden:""`

	filter resources.Filter
}

// Validate checks the range.
func (c *ReplayCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	f := resources.Filter{FromID: c.FromID, ToID: c.ToID, FailedOnly: c.Failed}
	switch {
	case c.FromID < 0:
		return usagef("--from-id must be positive, got %d", c.FromID)
	case c.ToID < 0:
		return usagef("--to-id must be positive, got %d", c.ToID)
	case c.ToID > 0 && c.FromID > c.ToID:
		return usagef("--from-id %d is after --to-id %d", c.FromID, c.ToID)
	}
	var err error
	if c.Since != "" {
		if f.Since, err = time.Parse(time.RFC3339, c.Since); err != nil {
			return usagef("--since must be an RFC 3339 time, got %q", c.Since)
		}
	}
	if c.Until != "" {
		if f.Until, err = time.Parse(time.RFC3339, c.Until); err != nil {
			return usagef("--until must be an RFC 3339 time, got %q", c.Until)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return usagef("--since must be before --until")
	}
	if c.FromID == 0 && c.ToID == 0 && c.Since == "" && c.Until == "" && !c.Failed {
		return usagef("replay needs a range: --from-id/--to-id, --since/--until or --failed")
	}
	c.filter = f
	return nil
}

// Run creates the replay (a row and a River job, in one transaction) and
// optionally follows it.
func (c *ReplayCmd) Run(ctx context.Context, env *Env) error {
	pool, err := database.Open(ctx, c.DatabaseURL, "syncer-replay")
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := resources.Count(ctx, pool, c.filter)
	if err != nil {
		return err
	}
	if c.DryRun {
		fmt.Fprintf(env.Stdout, "would send %d rows\n", n)
		return nil
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
		f := c.filter
		err := tx.QueryRow(ctx, `INSERT INTO syncer_replays (from_id, to_id, since, until, failed_only, total_rows)
			VALUES (NULLIF($1, 0), NULLIF($2, 0), $3, $4, $5, $6) RETURNING id`,
			f.FromID, f.ToID, nullTime(f.Since), nullTime(f.Until), f.FailedOnly, n).Scan(&id)
		if err != nil {
			return fmt.Errorf("create replay: %w", err)
		}
		_, err = rc.InsertTx(ctx, tx, jobs.ReplayArgs{ReplayID: id}, &river.InsertOpts{Queue: jobs.Queue, MaxAttempts: 1000})
		if err != nil {
			return fmt.Errorf("enqueue replay: %w", err)
		}
		// Wake the live job that holds the export lock, wherever it runs:
		// it gives the lock to a waiting replay instead of lingering.
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, migrations.Channel(schema)); err != nil {
			return fmt.Errorf("wake daemons: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "replay %d created: %d rows; running daemons will send them\n", id, n)
	if !c.Wait {
		return nil
	}
	return follow(ctx, env, pool, id, n, c.Poll)
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// follow shows a replay's progress until it is done: a progress bar on a
// terminal, a plain line every few seconds otherwise.
func follow(ctx context.Context, env *Env, pool *pgxpool.Pool, id, total int64, poll time.Duration) error {
	var bar *progressbar.ProgressBar
	if env.IsTerminal {
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(env.Stdout),
			progressbar.OptionSetDescription(fmt.Sprintf("replay %d", id)),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
		)
	}
	start := time.Now()
	lastLine := time.Time{}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM syncer_replays WHERE id = $1`, id).Scan(&state); err != nil {
			return fmt.Errorf("read replay: %w", err)
		}
		cp, err := checkpoint.Get(ctx, pool, checkpoint.Replay(id))
		if err != nil {
			return err
		}
		done := cp.RowsDone + cp.RowsFailed
		if bar != nil {
			_ = bar.Set64(min(done, total))
		} else if time.Since(lastLine) >= 2*time.Second || state == "done" {
			lastLine = time.Now()
			el := time.Since(start).Seconds()
			rate := float64(done) / max(el, 0.001)
			eta := "?"
			if done >= total || state == "done" {
				eta = "0s"
			} else if rate > 0 {
				eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
			}
			fmt.Fprintf(env.Stdout, "replay %d: %s, %d of %d rows, %.0f rows/s, eta %s\n", id, state, done, total, rate, eta)
		}
		switch state {
		case "done":
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(env.Stdout)
			}
			fmt.Fprintf(env.Stdout, "replay %d done: %d rows sent, %d failed\n", id, cp.RowsDone, cp.RowsFailed)
			return nil
		case "cancelled":
			return fmt.Errorf("replay %d was cancelled", id)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
