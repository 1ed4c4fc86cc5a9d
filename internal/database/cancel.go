package database

import (
	"context"
	"errors"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Why syncer sends no cancel request: one opens a connection of its own to
// the server, and through a pooler it is the one message a pooler must
// route to another client's server connection; PgBouncer 1.18 exited
// (`disconnect_client(): bad client state`) right after one of syncer's
// (issue 58), and a pooler that dies takes the application with it. pgx
// sends one in two places: when a statement's context is cancelled (its
// default context watcher), and whenever it gives up a connection in the
// middle of a statement (PgConn's asyncClose, whatever the watcher). So a
// cancelled context ends the connection instead (a deadline on its
// socket), and a connection dials nothing once it is open: the only dial
// pgx makes for an open connection is a cancel request's. A connection
// whose statement was cut short is of no further use anyway: pgx closes
// it, and a pool opens another.

// errNoCancelRequest is what pgx's cancel request's dial gets; pgx
// ignores it.
var errNoCancelRequest = errors.New("database: syncer sends no cancel request (issue 58)")

// NoCancelRequests makes every connection of the pool cfg send no cancel
// request.
func NoCancelRequests(cfg *pgxpool.Config) {
	cfg.ConnConfig.BuildContextWatcherHandler = deadlineWatcher
	prev := cfg.BeforeConnect
	cfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		if prev != nil {
			if err := prev(ctx, cc); err != nil {
				return err
			}
		}
		// cc is this connection's own copy.
		noCancelDial(cc)
		return nil
	}
}

// Connect opens one connection with cc that dials no cancel request once
// open. cc is not modified; what a cancelled context does is cc's
// BuildContextWatcherHandler's (ParseURL's ends the connection).
func Connect(ctx context.Context, cc *pgx.ConnConfig) (*pgx.Conn, error) {
	cc = cc.Copy()
	noCancelDial(cc)
	return pgx.ConnectConfig(ctx, cc)
}

func deadlineWatcher(pc *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
}

// noCancelDial refuses every dial of cc, which must be one connection's
// config, once that connection is open.
func noCancelDial(cc *pgx.ConnConfig) {
	var open atomic.Bool
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if open.Load() {
			return nil, errNoCancelRequest
		}
		return dial(ctx, network, addr)
	}
	after := cc.AfterConnect
	cc.AfterConnect = func(ctx context.Context, pc *pgconn.PgConn) error {
		if after != nil {
			if err := after(ctx, pc); err != nil {
				return err
			}
		}
		open.Store(true)
		return nil
	}
}
