package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/database"
)

// startWaitDefault is how long `syncer run` tries to reach a database that
// does not answer yet before it gives up.
const startWaitDefault = time.Minute

// openWaiting is openMigrated for `syncer run`: a database that does not
// answer yet (restarting, still starting up, a network blip) is tried again
// for up to limit, with backoff, as a supervisor would restart the daemon;
// a refusal that another try cannot change (authentication, a missing
// database or schema, a transaction-mode pooler, an old schema) ends the
// start at once. A stop asked for while it waits returns nil, nil.
func (d *DB) openWaiting(ctx context.Context, app string, logger *slog.Logger, limit time.Duration) (*pgxpool.Pool, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, limit
	var pool *pgxpool.Pool
	err := backoff.RetryNotify(func() error {
		var err error
		pool, err = d.openMigrated(ctx, app)
		if err != nil && (ctx.Err() != nil || !database.NotYet(err)) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx), func(err error, wait time.Duration) {
		logger.WarnContext(ctx, "run: the database does not answer yet; trying again",
			slog.Duration("in", wait), slog.String("error", err.Error()))
	})
	if ctx.Err() != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, nil
	}
	return pool, err
}
