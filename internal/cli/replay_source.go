package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/sources"
)

// validateSource checks the flags of a source's replay: a flag that names
// rows of resources, or that a source's replay does not take, is refused,
// never reinterpreted.
func (c *ReplayCmd) validateSource() error {
	switch {
	case c.FromID != 0 || c.ToID != 0:
		return usagef("--from-id and --to-id name rows of resources: with --source use --from-key and --to-key")
	case c.Failed:
		return usagef("--failed does not apply to --source: use syncer retry-failed --source %s", c.Source)
	}
	r := sources.ReplayRange{FromKey: c.FromKey, ToKey: c.ToKey}
	var err error
	if r.Since, r.Until, err = c.timeRange(); err != nil {
		return err
	}
	c.rng = r
	return nil
}

// createSource records a replay of a configured source and wakes its
// daemons, in one transaction, and follows it if asked.
func (c *ReplayCmd) createSource(ctx context.Context, env *Env, pool *pgxpool.Pool) error {
	all, err := sources.Load(ctx, pool)
	if err != nil {
		return err
	}
	var src *sources.Source
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
		if s.Name == c.Source {
			src = s
		}
	}
	if src == nil {
		return usagef("--source: no source %s is installed (installed: %s)", c.Source, strings.Join(names, ", "))
	}
	r := c.rng
	if !r.Since.IsZero() || !r.Until.IsZero() {
		// The time of a row's last change is the application's column:
		// syncer keeps none per row.
		cfg, err := c.ConfigFile.Load(false)
		if err != nil {
			return err
		}
		if cfg != nil && cfg.Source(c.Source) != nil {
			r.ChangedColumn = cfg.Source(c.Source).ChangedAt
		}
		if r.ChangedColumn == "" {
			return usagef("--since and --until with --source select rows by the time of their last change: name that column as changed_at of source %s in --config (SYNCER_CONFIG)", c.Source)
		}
	}
	if err := src.CheckRange(&r); err != nil {
		if errors.Is(err, sources.ErrBadKey) {
			return usagef("--from-key/--to-key of source %s (its key is %s): %v", src.Name, src.KeyType, strings.TrimSuffix(err.Error(), ": "+sources.ErrBadKey.Error()))
		}
		return usagef("%v", err)
	}
	n, err := sources.CountReplay(ctx, pool, src, r)
	if err != nil {
		return err
	}
	if c.DryRun {
		fmt.Fprintf(env.Stdout, "would send %d keys of source %s\n", n, src.Name)
		return nil
	}
	if n == 0 {
		return fmt.Errorf("no row of source %s matches the range: nothing to replay, no replay created", src.Name)
	}
	var id int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if id, err = sources.CreateReplay(ctx, tx, src, r, n); err != nil {
			return err
		}
		return outbox.Wake(ctx, tx, src.Name)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "replay %d created: %d keys of source %s; running daemons will send them\n", id, n, src.Name)
	if !c.Wait {
		return nil
	}
	return c.follow(ctx, env, id, n, "keys", keysProgress(pool, id))
}

// keysProgress reads a replay of a source: its keys are logged by the
// source's job, then accepted or rejected by the third party; it is
// finished when the job has logged them all and none is left to send.
func keysProgress(pool *pgxpool.Pool, id int64) func(context.Context) (progress, error) {
	return func(ctx context.Context) (progress, error) {
		state, err := replays.StateOf(ctx, pool, id)
		if err != nil {
			return progress{}, err
		}
		infos, err := sources.Replays(ctx, pool)
		if err != nil {
			return progress{}, err
		}
		info := infos[id]
		p := progress{state: state, done: max(info.KeysLogged-info.Unsent, 0), detail: fmt.Sprintf(" (%d queued)", info.KeysLogged)}
		if state == replays.StateDone && info.Unsent == 0 {
			p.end = fmt.Sprintf("replay %d done: %d keys sent", id, info.KeysLogged)
		}
		return p, nil
	}
}

// describeSourceRange writes a source replay's range as the flags that
// made it.
func describeSourceRange(src string, r sources.ReplayRange) string {
	parts := []string{"source " + src}
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
	if len(parts) == 1 {
		parts = append(parts, "all rows")
	}
	return strings.Join(parts, ", ")
}
