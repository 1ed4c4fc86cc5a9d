package database

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is the one seam every package that runs SQL takes: a pool, a
// connection or a transaction satisfies it, so a function that is handed a
// transaction runs inside it and one handed the pool runs on its own. It is
// deliberately the three calls pgx's types share and nothing more, as
// River's executor is: a package that needs a transaction of its own asks
// for a DB.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is a Querier that can also open a transaction: the pool, a connection,
// or a transaction (whose Begin is a savepoint).
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// The types syncer hands around satisfy both.
var (
	_ DB = (*pgx.Conn)(nil)
	_ DB = pgx.Tx(nil)
)
