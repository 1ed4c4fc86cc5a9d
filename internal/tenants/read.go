package tenants

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/database"
)

// How a read of tenants' rows runs, so that a connections table locked by
// a migration fails it in tenants.timeout, its connection back in the
// pool (docs/design.md, "The statement is parsed after its timeouts").
//
// Parsing a statement takes the locks of the tables it reads. pgx's
// statement cache prepared the query in a round trip of its own, before
// the batch that sets the timeouts, on every connection that had not run
// it yet: with the table locked, the prepare waited with no timeout until
// the read's context ended; the connection was then closed, and, syncer
// sending no cancel request (database.NoCancelRequests), its close held a
// slot of the pool 15 s more while its session stayed in the lock's
// queue. The pool opened new connections, which prepared again: a pool of
// 4 was soon all theirs, River's and the other sources' share included
// (the e2e TestLockedConnectionsTableStopsNoOtherSource, once in CI).

// read runs the query for tenant (the caller holds a slot of the gate):
// readMany's round trip, for one tenant.
func (r *Registry) read(ctx context.Context, tenant string) (*connection, error) {
	res := r.readMany(ctx, []string{tenant})
	return res[0].conn, res[0].err
}

// readTimeoutsSQL sets the statement and lock timeouts of the implicit
// transaction it starts: set_config's local form, not a session's SET, so
// that a connection going back to the pool (or through a transaction
// pooler) keeps nothing of it.
const readTimeoutsSQL = `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)`

// readMany runs the query for each of tenants (at least one) in one round
// trip, up to and including the first that PostgreSQL refused: the
// implicit transaction ends there. A row that cannot be used (rowError) is
// the tenant's own and the rest go on. It returns a result for each tenant
// read, at least one.
//
// The round trip is one batch ending in one Sync, which PostgreSQL runs as
// one implicit transaction: the timeouts first (readTimeoutsSQL), then a
// statement for each tenant. Where the pool prepares statements (pgx's
// statement cache, a direct connection or a session pooler), the query is
// prepared on the connection first, once, in a transaction whose timeouts
// are set before (prepareBounded); through a transaction pooler (no
// prepared statement), each statement is the batch's unnamed one, parsed
// in its transaction after the timeouts (readUnnamed).
//
// One round trip, where BEGIN, the settings, the query and COMMIT were
// four: each connected tenant's row is read once a second while it sends
// (ReadFresh) and each idle tenant's every RefreshEvery (Reread), and each
// of those four held one of the pool's five connections (issue 54: 200
// tenants sending and 10,000 idle ones).
func (r *Registry) readMany(ctx context.Context, tenants []string) []readResult {
	timeout := r.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout+queryGrace)
	defer cancel()
	c, err := r.cfg.Pool.Acquire(ctx)
	if err != nil {
		return []readResult{failedRead(err, timeout)}
	}
	defer c.Release()
	ms := strconv.FormatInt(max(timeout.Milliseconds(), 1), 10) + "ms"
	sql := connectionSQL(r.cfg.Settings.Query)
	if !r.prepares {
		return readUnnamed(ctx, c, sql, ms, tenants, timeout)
	}
	if err := prepareBounded(ctx, c, sql, ms); err != nil {
		return []readResult{failedRead(err, timeout)}
	}
	b := &pgx.Batch{}
	b.Queue(readTimeoutsSQL, ms)
	for _, t := range tenants {
		b.Queue(sql, t) // prepared: no parse here
	}
	br := c.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return []readResult{failedRead(err, timeout)}
	}
	out := make([]readResult, 0, len(tenants))
	for range tenants {
		rows, err := br.Query()
		var conn *connection
		if err == nil {
			conn, err = scanConnection(rows)
		}
		conn, err = readOutcome(conn, err, timeout)
		out = append(out, readResult{conn: conn, err: err})
		if re := (*rowError)(nil); err != nil && !errors.As(err, &re) {
			break
		}
	}
	return out
}

// failedRead is the result of a read that failed with err.
func failedRead(err error, timeout time.Duration) readResult {
	conn, err := readOutcome(nil, err, timeout)
	return readResult{conn: conn, err: err}
}

// preparedMark marks, in a connection's CustomData, a statement
// prepareBounded prepared on it (the key ends with the statement).
const preparedMark = "syncer/tenants.prepared:"

// prepareBounded prepares sql on c (named after sql, as pgx's Prepare
// does; pgx's batches then use it) unless it already did, in a transaction
// whose statement and lock timeouts (ms) are set first: the parse waits on
// a locked table for ms at most, and fails the transaction alone.
func prepareBounded(ctx context.Context, c *pgxpool.Conn, sql, ms string) error {
	data := c.Conn().PgConn().CustomData()
	if data[preparedMark+sql] != nil {
		return nil
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after a commit, nothing
	if _, err := tx.Exec(ctx, readTimeoutsSQL, ms); err != nil {
		return err
	}
	if _, err := c.Conn().Prepare(ctx, sql, sql); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	data[preparedMark+sql] = true
	return nil
}

// readUnnamed is readMany's round trip on a connection that prepares
// nothing (through a transaction pooler): each statement is the batch's
// unnamed one, parsed in the batch's transaction after the timeouts, the
// type of its $1 PostgreSQL's to infer, as a prepared statement's is.
func readUnnamed(ctx context.Context, c *pgxpool.Conn, sql, ms string, tenants []string, timeout time.Duration) []readResult {
	b := &pgconn.Batch{}
	b.ExecParams(readTimeoutsSQL, [][]byte{[]byte(ms)}, nil, nil, nil)
	for _, t := range tenants {
		b.ExecParams(sql, [][]byte{[]byte(t)}, nil, nil, nil)
	}
	results, err := c.Conn().PgConn().ExecBatch(ctx, b).ReadAll()
	if len(results) > 0 && results[0].Err != nil {
		return []readResult{failedRead(results[0].Err, timeout)}
	}
	out := make([]readResult, 0, len(tenants))
	for i := 1; i < len(results) && len(out) < len(tenants); i++ {
		if results[i].Err != nil {
			return append(out, failedRead(results[i].Err, timeout))
		}
		raw := make([][]byte, len(results[i].Rows))
		for j, row := range results[i].Rows {
			if len(row) > 0 {
				raw[j] = row[0]
			}
		}
		conn, rerr := connectionOf(raw)
		out = append(out, readResult{conn: conn, err: rerr})
	}
	if len(out) == 0 || (err != nil && len(out) < len(tenants)) {
		// The round trip ended before the next tenant's answer (the
		// connection broke, the context ended).
		if err == nil {
			err = errors.New("the round trip ended with no answer")
		}
		out = append(out, failedRead(err, timeout))
	}
	return out
}

// readInTx runs the query for tenant in q's transaction (its account
// record's, a refresh grant's) with a lock timeout of timeout for that read
// alone: a connections table locked by a migration fails the read, and
// the transaction, in tenants.timeout, its connection back in the pool,
// where it would have waited in the lock's queue until its context ended
// (a request's, or none), and then, its connection closed with no cancel
// request, held a slot of the pool 15 s more. The statement is parsed (or
// prepared) in the transaction, after the setting; what the transaction
// does after the read (a replay planned, on_refresh) has its lock timeout
// as before.
func readInTx(ctx context.Context, q database.Querier, query, tenant string, timeout time.Duration) (*connection, error) {
	ms := strconv.FormatInt(max(timeout.Milliseconds(), 1), 10) + "ms"
	var was, set string
	if err := q.QueryRow(ctx, `SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)`, ms).Scan(&was, &set); err != nil {
		return nil, err
	}
	c, err := readConnection(ctx, q, query, tenant)
	var re *rowError
	if err != nil && !errors.As(err, &re) {
		return nil, err
	}
	if _, err := q.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, was); err != nil {
		return nil, err
	}
	return c, err
}
