package locks

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A pipe's receiving side: reading a transaction's results up to its
// Sync, running its statements' callbacks, and the deadline of that wait.

// read reads one transaction's results, up to its Sync, and runs its
// callbacks; its error is kept in tx.
func (p *Pipe) read(tx *pipeTx) {
	tx.read = true
	if p.pl == nil {
		tx.err = fmt.Errorf("locks: pipe: %w", firstErr(p.lk.Err(), errors.New("session left pipeline mode")))
		return
	}
	stop := p.watch(tx.deadline)
	defer stop()
	var first error
	res := &pipeResult{conn: p.lk.conn}
	for i := -1; i < len(tx.qs) && first == nil; i++ {
		res.next(p.pl.GetResults())
		if i < 0 {
			// The head: the lock and fence check.
			_, err := res.Exec()
			first = err
			continue
		}
		if res.err != nil {
			// The statement failed: its callback would only see the error.
			first = fmt.Errorf("locks: pipe: %s: %w", firstLine(tx.qs[i].SQL), res.err)
			break
		}
		var err error
		if fn := tx.qs[i].Fn; fn != nil {
			err = fn(res)
		} else {
			_, err = res.Exec()
		}
		res.close()
		if err == nil {
			err = res.err
		}
		first = err
	}
	// Up to the Sync: after an error, pgconn skips what the server skipped.
	for {
		r, err := p.pl.GetResults()
		if _, ok := r.(*pgconn.PipelineSync); ok {
			break
		}
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				// The commit itself failed (a deferred constraint, say).
				first = firstErr(first, err)
				continue
			}
			first = firstErr(first, err)
			p.pl = nil
			break
		}
		if r == nil {
			first = firstErr(first, errors.New("locks: pipe: results ended before the transaction's Sync"))
			p.pl = nil
			break
		}
		if rr, ok := r.(*pgconn.ResultReader); ok {
			rr.Close()
		}
	}
	switch {
	case first == nil:
	case isNotHeld(first):
		first = errVanished
	case isNotFenced(first):
		first = fmt.Errorf("locks: pipe: %w", ErrEarlierFailed)
	}
	tx.err = p.lk.settle(first, "pipe")
	if tx.err != nil && p.lk.conn.IsClosed() {
		p.pl = nil
	}
}

// watch bounds a wait for results by deadline (the zero deadline never
// passes): past it, the transaction's connection is closed, so the read
// fails and the pool opens another; what was in flight did not commit, or
// its outcome is unknown, as for any client. No cancel request (see
// database.NoCancelRequests): the server ends the transaction when it
// finds its client gone, and a transaction of the lock that does not end
// keeps its fence, which a daemon taking the lock over ends with the
// lease.
func (p *Pipe) watch(deadline time.Time) (stop func()) {
	if deadline.IsZero() {
		return func() {}
	}
	pgc := p.lk.conn.PgConn()
	closeT := time.AfterFunc(time.Until(deadline), func() {
		_ = pgc.Conn().Close()
	})
	return func() { closeT.Stop() }
}

func firstLine(sql string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	return line
}

// firstErr returns a if it is an error, else b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// pipeResult hands one statement's result to its callback as pgx's batch
// results would.
type pipeResult struct {
	conn *pgx.Conn
	rr   *pgconn.ResultReader
	rows pgx.Rows
	err  error
}

func (r *pipeResult) next(res any, err error) {
	r.rr, r.rows, r.err = nil, nil, err
	if err != nil {
		return
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		r.err = fmt.Errorf("locks: pipe: unexpected result %T", res)
		return
	}
	r.rr = rr
}

func (r *pipeResult) close() {
	if r.rows != nil {
		r.rows.Close()
		if err := r.rows.Err(); err != nil && r.err == nil {
			r.err = err
		}
	} else if r.rr != nil {
		if _, err := r.rr.Close(); err != nil && r.err == nil {
			r.err = err
		}
	}
	r.rr, r.rows = nil, nil
}

func (r *pipeResult) Exec() (pgconn.CommandTag, error) {
	if r.err != nil || r.rr == nil {
		return pgconn.CommandTag{}, firstErr(r.err, errors.New("locks: pipe: result already read"))
	}
	tag, err := r.rr.Close()
	r.rr = nil
	if err != nil {
		r.err = err
	}
	return tag, err
}

func (r *pipeResult) Query() (pgx.Rows, error) {
	if r.err != nil || r.rr == nil {
		return nil, firstErr(r.err, errors.New("locks: pipe: result already read"))
	}
	r.rows = pgx.RowsFromResultReader(r.conn.TypeMap(), r.rr)
	r.rr = nil
	return r.rows, nil
}

func (r *pipeResult) QueryRow() pgx.Row {
	rows, err := r.Query()
	return oneRow{rows, err}
}

// Tx is nil: a pipe's transactions are implicit.
func (r *pipeResult) Tx() pgx.Tx { return nil }

func (r *pipeResult) Close() error {
	r.close()
	return r.err
}

type oneRow struct {
	rows pgx.Rows
	err  error
}

func (o oneRow) Scan(dest ...any) error {
	if o.err != nil {
		return o.err
	}
	defer o.rows.Close()
	if !o.rows.Next() {
		if err := o.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := o.rows.Scan(dest...); err != nil {
		return err
	}
	o.rows.Close()
	return o.rows.Err()
}
