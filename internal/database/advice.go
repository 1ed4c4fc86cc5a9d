package database

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RoleAdvice says what the role of a pool through a transaction pooler
// lacks, "" when nothing. syncer cannot make the setting itself there (a
// session setting would stay on the pooler's server session), and without
// it a daemon frozen inside a transaction (SIGSTOP, a paused VM) keeps
// that transaction's locks, the relay round's among them, for as long as
// it stays frozen: every other daemon waits on it, past the lease that a
// takeover is promised within.
func RoleAdvice(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var idle, user string
	if err := pool.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout'), current_user`).Scan(&idle, &user); err != nil {
		return "", fmt.Errorf("database: the role's settings: %w", err)
	}
	if idle != "0" {
		return "", nil
	}
	return fmt.Sprintf("through a pooler in transaction mode the role's idle_in_transaction_session_timeout is 0: "+
		"a daemon frozen inside a transaction keeps its locks, and holds up the other daemons, until it wakes: "+
		"ALTER ROLE %s SET idle_in_transaction_session_timeout = '%s'",
		pgx.Identifier{user}.Sanitize(), IdleInTransactionTimeoutDefault), nil
}
