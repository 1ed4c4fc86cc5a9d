package tenants

import (
	"context"
	"errors"
	"fmt"
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
		// The lock timeout is the same: either may end a wait on a lock.
		msg += " (it ran past tenants.timeout, " + e.Timeout.String() + ": a table it reads is locked, or the query is slow)"
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
