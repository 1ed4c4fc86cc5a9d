package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/sources"
)

// retrySource makes a configured source's failed keys eligible again, all
// of them or those of --key. With --key it says, key by key, what it did:
// a key that was not failed is left alone and named, so that a mistyped
// key is never a silent "0 eligible again". It returns the keys named, in
// their text form (nil: all of them), for their holds to be released too.
func (c *RetryFailedCmd) retrySource(ctx context.Context, env *Env, pool *pgxpool.Pool) ([]string, error) {
	if len(c.Key) == 0 {
		n, err := operator.Retry(ctx, pool, rows.Scope{Source: c.Source}, nil)
		if err != nil {
			return nil, fmt.Errorf("retry failed keys: %w", err)
		}
		if n == 0 {
			fmt.Fprintf(env.Stdout, "source %s: 0 failed keys are eligible again: no key of the source is failed\n", c.Source)
			return nil, nil
		}
		fmt.Fprintf(env.Stdout, "source %s: %s eligible again\n", c.Source, count(n, "failed key is", "failed keys are"))
		return nil, nil
	}
	src, err := openRows(ctx, pool, rows.Scope{Source: c.Source})
	if err != nil {
		return nil, err
	}
	keys, err := c.normalizedKeys(src)
	if err != nil {
		return nil, err
	}
	name := src.Scope().Source
	var retried []string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		retried = retried[:0]
		// One key at a time: the keys are the few an operator typed, and
		// each answer says whether that key was failed.
		for _, k := range keys {
			n, err := src.Retry(ctx, tx, []string{k})
			if err != nil {
				return err
			}
			if n > 0 {
				retried = append(retried, k)
			}
		}
		if len(retried) == 0 {
			return nil
		}
		return outbox.Wake(ctx, tx, name)
	})
	if err != nil {
		return nil, fmt.Errorf("retry failed keys: %w", err)
	}
	fmt.Fprintf(env.Stdout, "source %s: %d of %s failed; %s eligible again\n",
		name, len(retried), count(int64(len(keys)), "key named was", "keys named were"), count(int64(len(retried)), "failed key is", "failed keys are"))
	for _, k := range keys {
		if !slices.Contains(retried, k) {
			fmt.Fprintf(env.Stdout, "  key %s: %s\n", k, notFailed(ctx, pool, src, k))
		}
	}
	return keys, nil
}

// installedSource returns the installed source name, or an error naming
// the installed ones.
func installedSource(ctx context.Context, pool *pgxpool.Pool, name string) (*sources.Source, error) {
	all, err := sources.Load(ctx, pool)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return nil, noSource(&operator.NoSourceError{Name: name, Installed: names})
}

// openRows is rows.Open, whose *NoSourceError says the installed sources
// as installedSource's does.
func openRows(ctx context.Context, pool *pgxpool.Pool, sc rows.Scope) (rows.Rows, error) {
	r, err := rows.Open(ctx, pool, sc)
	var none *operator.NoSourceError
	if errors.As(err, &none) {
		return nil, noSource(none)
	}
	return r, err
}

func noSource(e *operator.NoSourceError) error {
	return fmt.Errorf("retry failed keys: %w (installed: %s)", e, strings.Join(e.Installed, ", "))
}

// normalizedKeys returns --key in the text form the failures are recorded
// under (an integer in decimal, a uuid in lower case, a composite key's
// compact JSON array), each once.
func (c *RetryFailedCmd) normalizedKeys(src rows.Rows) ([]string, error) {
	var keys []string
	for _, k := range c.Key {
		n, err := src.ParseKey(k)
		if err != nil {
			if errors.Is(err, sources.ErrBadKey) {
				return nil, usagef("--key of source %s (its key is %s): %v", src.Scope().Source, src.KeyType(), strings.TrimSuffix(err.Error(), ": "+sources.ErrBadKey.Error()))
			}
			return nil, usagef("--key: %v", err)
		}
		if !slices.Contains(keys, n) {
			keys = append(keys, n)
		}
	}
	return keys, nil
}

// notFailed says why key was left alone: not failed, or no row of the
// source has it (a mistyped key). It reads the application's table, after
// the retry is committed: a read that fails only makes the answer vaguer.
func notFailed(ctx context.Context, pool *pgxpool.Pool, src rows.Rows, key string) string {
	n, err := src.ReplayTable().CountReplay(ctx, pool, &replays.Request{Source: src.Scope().Source, Range: replays.SourceRange{FromKey: key, ToKey: key}})
	switch {
	case err != nil:
		return "not failed, left alone"
	case n == 0:
		return "not found: no row of the source has this key"
	}
	return "not failed (pending or synced), left alone"
}
