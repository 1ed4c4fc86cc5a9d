package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
		if err != nil && (ctx.Err() != nil || !notYet(err)) {
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

// notYet reports whether err says the server is there but cannot take the
// daemon now: it is starting up or shutting down (a restart), has no
// connection to spare, or accepted the connection and did not answer in
// time, or dropped it (a reset). Nothing listening (a refused connection) and the server's other
// refusals are final, so a wrong address still fails at once.
func notYet(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exceptions; 57P03: starting up or shutting down;
		// 53300: too many connections.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P03" || pe.Code == "53300"
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || (errors.As(err, &ne) && ne.Timeout()) ||
		// The server took the connection and dropped it: a restart.
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}
