package tenants

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
)

// The tenants query never holds the export (docs/protocol.md section
// 10.1): it runs with a statement timeout, on at most QueryConnsDefault
// connections of a daemon at once, and a tenant whose credentials are
// held goes on with them while it cannot run.
const (
	// QueryTimeoutDefault is Settings.Timeout's default: the longest one
	// run of the query may take, waiting for a lock included.
	QueryTimeoutDefault = 5 * time.Second
	// QueryConnsDefault is how many tenants queries a QueryGate lets run
	// at once: the connections of the daemon's pool they may hold.
	QueryConnsDefault = 2
	// QueryWait is the longest a tenant without a deliverer waits for a
	// slot of the gate: past it, its rows wait (ErrQueryBusy) and the
	// lane goes on with its other tenants.
	QueryWait = time.Second
	// QueryRetry is how long a connected tenant whose query could not
	// run (a timeout, a lock, the database away) goes on with its row
	// before the query is tried again for it.
	QueryRetry = 5 * time.Second
)

// ErrQueryBusy says every slot of the QueryGate stayed taken for
// QueryWait: the tenant's rows wait; it is asked again.
var ErrQueryBusy = errors.New("tenants: the tenants query is running on every connection it may use (tenants.timeout bounds each run)")

// QueryGate bounds the tenants queries running at once. The daemon gives
// every destination's registry the same gate, so that all of its tenants
// queries hold at most its size of the pool's connections, whatever the
// lanes and destinations: a table locked by a migration takes those
// connections, never the pool (River's, the sources' without tenants).
type QueryGate struct{ slots chan struct{} }

// NewQueryGate returns a gate of n slots (QueryConnsDefault when n <= 0).
func NewQueryGate(n int) *QueryGate {
	if n <= 0 {
		n = QueryConnsDefault
	}
	return &QueryGate{slots: make(chan struct{}, n)}
}

// try takes a slot if one is free now.
func (g *QueryGate) try() bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// wait takes a slot, waiting at most d or until ctx ends.
func (g *QueryGate) wait(ctx context.Context, d time.Duration) error {
	if g.try() {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-t.C:
		return ErrQueryBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *QueryGate) release() { <-g.slots }

// QueryError is a run of the tenants query that PostgreSQL refused for a
// tenant. It says the SQLSTATE and its condition name ("22012
// division_by_zero"), never PostgreSQL's message, which may quote a value
// of a row (a token); only a statement that does not compile (class 42)
// keeps its message, which names columns and tables, not values.
type QueryError struct {
	// Code is the SQLSTATE.
	Code string
	// State is Code with its condition name.
	State string
	// Detail is PostgreSQL's message of a class 42 error, "" otherwise.
	Detail string
	// Timeout is the tenants.timeout that a cancelled run reached.
	Timeout time.Duration
}

func (e *QueryError) Error() string {
	msg := "tenants.query failed for the tenant: SQLSTATE " + e.State
	switch e.Code {
	case "57014": // query_canceled: the statement timeout
		msg += " (it ran past tenants.timeout, " + e.Timeout.String() + ")"
	case "55P03": // lock_not_available: the lock timeout
		msg += " (a table it reads stayed locked past tenants.timeout, " + e.Timeout.String() + ")"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Transient reports whether the failure is the database's moment rather
// than the query's answer for the tenant: a timeout, a lock, a lost or
// overloaded server, a serialization failure. A tenant whose credentials
// are held goes on with them through such a failure.
func (e *QueryError) Transient() bool {
	switch e.Code {
	case "57014", "55P03", "40001", "40P01":
		return true
	}
	switch e.Code[:2] {
	case "08", "53", "57", "58":
		return true
	}
	return false
}

// queryFailed makes err, a failure of the query's run, a *QueryError when
// PostgreSQL answered it; any other error (a connection that broke, a
// cancelled context) is returned wrapped.
func queryFailed(err error, timeout time.Duration) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return fmt.Errorf("tenants.query: %w", err)
	}
	qe := &QueryError{Code: pe.Code, State: database.SQLState(pe), Timeout: timeout}
	if strings.HasPrefix(pe.Code, "42") {
		qe.Detail = pe.Message
	}
	return qe
}

// timeout is the query's statement timeout.
func (r *Registry) timeout() time.Duration {
	if s := r.cfg.Settings; s != nil && s.Timeout > 0 {
		return s.Timeout
	}
	return QueryTimeoutDefault
}

// queryGrace is how long past the statement timeout the client waits for
// the server's answer before it gives up on the connection itself.
const queryGrace = 2 * time.Second

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
// one implicit transaction: the timeouts first (readTimeoutsSQL,
// tenants.timeout), then a statement for each tenant, each parsed in that
// transaction, after the timeouts are set: the unnamed statement, the type
// of its $1 PostgreSQL's to infer, as a prepared statement's was. Parsing
// a statement takes the locks of the tables it reads. The statement was
// prepared (pgx's statement cache) in a round trip of its own, before the
// batch, on every connection that had not run it yet: with the table
// locked by a migration, the prepare waited with no timeout until the
// read's context ended; the connection was then closed, and, syncer
// sending no cancel request (database.NoCancelRequests), its close held a
// slot of the pool for 15 s more while its session stayed in the lock's
// queue. The pool opened new connections, which prepared again: a pool
// of 4 was soon all theirs, River's and the other sources' share
// included (the e2e TestLockedConnectionsTableStopsNoOtherSource, once in
// CI).
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
	failed := func(err error) readResult {
		conn, err := readOutcome(nil, err, timeout)
		return readResult{conn: conn, err: err}
	}
	c, err := r.cfg.Pool.Acquire(ctx)
	if err != nil {
		return []readResult{failed(err)}
	}
	defer c.Release()
	ms := strconv.FormatInt(max(timeout.Milliseconds(), 1), 10) + "ms"
	b := &pgconn.Batch{}
	b.ExecParams(readTimeoutsSQL, [][]byte{[]byte(ms)}, nil, nil, nil)
	sql := connectionSQL(r.cfg.Settings.Query)
	for _, t := range tenants {
		b.ExecParams(sql, [][]byte{[]byte(t)}, nil, nil, nil)
	}
	results, err := c.Conn().PgConn().ExecBatch(ctx, b).ReadAll()
	if len(results) > 0 && results[0].Err != nil {
		return []readResult{failed(results[0].Err)}
	}
	out := make([]readResult, 0, len(tenants))
	for i := 1; i < len(results) && len(out) < len(tenants); i++ {
		if results[i].Err != nil {
			return append(out, failed(results[i].Err))
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
		out = append(out, failed(err))
	}
	return out
}

// readInTx runs the query for tenant in q's transaction (its account
// record's, a refresh grant's) with a lock timeout of timeout for that read
// alone: a connections table locked by a migration fails the read, and
// the transaction, in tenants.timeout, its connection back in the pool,
// where it would have waited in the lock's queue until its context ended
// (a request's, or none), and then, its connection closed with no cancel
// request, held a slot of the pool 15 s more (readMany). The statement is
// parsed in the transaction, after the setting; what the transaction does
// after the read (a replay planned, on_refresh) has its lock timeout as
// before.
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

// readOutcome is what a read of a row gave: the connection, a rowError
// (the tenant's own), a *QueryError or another failure of the run.
func readOutcome(conn *connection, err error, timeout time.Duration) (*connection, error) {
	var re *rowError
	if err != nil && !errors.As(err, &re) {
		var qe *QueryError
		if errors.As(err, &qe) {
			return nil, qe
		}
		return nil, queryFailed(err, timeout)
	}
	return conn, err
}
