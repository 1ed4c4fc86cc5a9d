package database

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrTransactionPooling is wrapped by a PoolerError.
var ErrTransactionPooling = errors.New("a connection pooler in transaction or statement pooling mode")

// PoolerError says that a URL leads to a connection pooler where syncer
// cannot work through it: a pooler in statement mode (PgBouncer's
// pool_mode=statement: syncer's transactions have several statements), or
// SYNCER_DIRECT_URL through a pooler in transaction mode (it is the one
// connection meant to hold session state). DATABASE_URL through a pooler
// in transaction mode works, with or without SYNCER_DIRECT_URL. It is the
// user's setting: the CLI exits 2 on it.
type PoolerError struct {
	// Name is the setting: "DATABASE_URL" or "SYNCER_DIRECT_URL".
	Name string
	// Where names the host, port and database, without credentials.
	Where string
	// Reason says what the probe saw.
	Reason string
	// Mode is what the probe found.
	Mode Pooling
}

func (e *PoolerError) Error() string {
	name := cmp.Or(e.Name, "DATABASE_URL")
	if e.Mode == StatementPooling {
		return fmt.Sprintf("%s (%s) goes through %s (PgBouncer pool_mode=statement?; %s): "+
			"syncer's transactions have several statements; use pool_mode=transaction or pool_mode=session",
			name, e.Where, ErrTransactionPooling, e.Reason)
	}
	return fmt.Sprintf("%s (%s) goes through %s (PgBouncer pool_mode=transaction?; %s): "+
		"it is the one connection that may hold syncer's session state; give it a direct PostgreSQL URL or a session-pooled one (pool_mode=session), "+
		"or leave it unset: DATABASE_URL alone works through a transaction pooler",
		name, e.Where, ErrTransactionPooling, e.Reason)
}

// Unwrap makes errors.Is(err, ErrTransactionPooling) true.
func (e *PoolerError) Unwrap() error { return ErrTransactionPooling }

// IsUsage reports that the error is the user's setting.
func (e *PoolerError) IsUsage() bool { return true }

// probeTimeout bounds one statement of the pooler probe. A statement that
// takes longer while the probe's other connection holds a transaction open
// was queued for a server connection: only a pooler sharing server
// connections between clients does that.
const probeTimeout = 3 * time.Second

// probeRounds is how many times the probe tries to make a pooler give one
// client two server sessions.
const probeRounds = 3

// Pooling is what DetectPooling found between syncer and PostgreSQL.
type Pooling int

const (
	// Direct: the backend pid PostgreSQL reports is the one it announced
	// at connection start, so nothing stands in between.
	Direct Pooling = iota
	// SessionPooling: a pooler stands in between (it announced a pid of
	// its own) and kept every client on one server session.
	SessionPooling
	// TransactionPooling: a pooler gave one client's transactions to
	// different server sessions.
	TransactionPooling
	// StatementPooling: a pooler refused a transaction block.
	StatementPooling
)

func (p Pooling) String() string {
	switch p {
	case Direct:
		return "direct"
	case SessionPooling:
		return "session pooling"
	case StatementPooling:
		return "statement pooling"
	default:
		return "transaction pooling"
	}
}

// DetectPooling tells whether cc leads to PostgreSQL directly, through a
// pooler in session mode, or through one in transaction (or statement)
// mode, with reason saying what was seen for the last.
//
// A direct session reports as pg_backend_pid() the pid it announced in its
// BackendKeyData; a pooler announces one of its own (PgBouncer, a random
// cancel key). Past a pooler, one client (A) runs a statement and learns its
// server session's pid P; a second client (B) opens a transaction, which
// takes the server session A just released if the pooler releases it (in
// transaction mode PgBouncer reuses the last one released first); then A
// asks its pid again. In session mode it is P, always; in transaction mode
// it is another one, or A waits for a server session (a pool of one), which
// a session-mode A never does. Three rounds make a false "session" as
// unlikely as a busy pooler giving P back twice in a row to the same client.
//
// The probe's connections carry no setting beyond what the pooler accepts
// in the startup packet, so nothing leaks to the pooler's other clients.
func DetectPooling(ctx context.Context, cc *pgx.ConnConfig) (mode Pooling, reason string, err error) {
	raw := cc.Copy()
	raw.AfterConnect = nil
	for k := range raw.RuntimeParams {
		if !startupParams[strings.ToLower(k)] {
			delete(raw.RuntimeParams, k)
		}
	}
	a, err := Connect(ctx, raw)
	if err != nil {
		return Direct, "", err
	}
	defer closeQuietly(a)
	p, err := backendPID(ctx, a)
	if err != nil {
		return Direct, "", err
	}
	if p == a.PgConn().PID() {
		return Direct, "", nil
	}
	b, err := Connect(ctx, raw)
	if err != nil {
		return Direct, "", err
	}
	defer closeQuietly(b)
	for range probeRounds {
		mode, reason, err := probeRound(ctx, a, b)
		if err != nil || mode != SessionPooling {
			return mode, reason, err
		}
	}
	return SessionPooling, "", nil
}

func probeRound(ctx context.Context, a, b *pgx.Conn) (Pooling, string, error) {
	p1, err := backendPID(ctx, a)
	if err != nil {
		return Direct, "", err
	}
	bctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	tx, err := b.Begin(bctx)
	if err != nil {
		// PgBouncer in statement mode refuses transaction blocks.
		return StatementPooling, "it refused a transaction block: " + err.Error(), nil
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if _, err := backendPID(bctx, tx); err != nil {
		// PgBouncer in statement mode refuses transaction blocks.
		return StatementPooling, "it refused a transaction block: " + err.Error(), nil
	}
	actx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	p2, err := backendPID(actx, a)
	switch {
	case err != nil && actx.Err() != nil && ctx.Err() == nil:
		return TransactionPooling, "a client waited for a server session while another held a transaction", nil
	case err != nil:
		return Direct, "", err
	case p2 != p1:
		return TransactionPooling, fmt.Sprintf("one client's statements ran on server pids %d and %d", p1, p2), nil
	}
	return SessionPooling, "", nil
}

func backendPID(ctx context.Context, q Querier) (uint32, error) {
	var pid int32
	// The simple protocol: a pooler in transaction mode before PgBouncer
	// 1.21 loses a client's prepared statements between transactions.
	err := q.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid)
	return uint32(pid), err
}

func closeQuietly(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	_ = c.Close(ctx)
}
