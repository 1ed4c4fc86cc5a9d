package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrEarlierFailed is wrapped by Pipe.Receive for a transaction that did not
// run because the one sent before it on the pipe did not commit.
var ErrEarlierFailed = errors.New("locks: the transaction sent before this one did not commit")

// Pipe sends transactions on a pooled connection without waiting for the ones
// before them to finish, and reads their results in the order they were
// sent. Each is one pgx.Batch sent without BEGIN and ending in one Sync, so
// PostgreSQL runs it as one implicit transaction: it commits at the Sync if
// every statement succeeded, and any error rolls all of it back. Each
// starts with a check, in SQL, that the transaction sent before it
// committed, so what a transaction writes never lands after one before it
// failed, and (Send, not SendChained) that the session still holds the
// lock. Through a pooler in transaction mode (Config.Stateless) it sends
// nothing ahead (pipe_stateless.go).
//
// Why: the marker transaction is an export's one serial stage, and between
// two of them the session is idle while the answer travels to the daemon,
// the next transaction is built and travels back (about a third of a
// transaction's time on a busy machine). With the next transaction already
// on the wire, PostgreSQL starts it the moment the last one commits.
//
// A Pipe is for one goroutine. While it has transactions in flight it holds
// the lock's session: WithTx and Release wait, and the self-check skips its
// rounds (a transaction sent with Send checks the lock itself, and one sent
// with SendChained is harmless after a loss).
type Pipe struct {
	lk *Lock
	pl *pgconn.Pipeline
	// args are the statements' encoded arguments (params.go).
	args params
	// sent are the transactions whose results the caller has not had, in
	// order; the first ones may have been read already (see drain).
	sent []*pipeTx
	// last is the token the last transaction sent sets when it commits.
	last string
}

type pipeTx struct {
	qs       []*pgx.QueuedQuery
	deadline time.Time
	read     bool
	err      error
}

// NewPipe returns a Pipe on the lock's session.
func (lk *Lock) NewPipe() *Pipe {
	return &Pipe{lk: lk}
}

// Prepares reports whether the pipe's statements are prepared by name
// on its session, so that PostgreSQL may keep their plans: not through a
// pooler in transaction mode (pipe_stateless.go).
func (p *Pipe) Prepares() bool { return !p.lk.locker.stateless }

// InFlight is how many transactions were sent and not yet received.
func (p *Pipe) InFlight() int { return len(p.sent) }

// Send sends the statements queue adds to b as one transaction, and returns
// without waiting for them. ctx's deadline, if any, bounds the
// transaction's results; ctx's cancellation is not watched (a marker must
// be able to finish what it sent). Callbacks (see pgx.QueuedQuery) run in
// Receive, after the transaction is over, and cannot veto it. An error from
// queue is returned as it is, and nothing is sent.
func (p *Pipe) Send(ctx context.Context, queue func(b *pgx.Batch) error) error {
	return p.sendTx(ctx, true, queue)
}

// SendChained is Send for a transaction that is harmless after the lock is
// lost: it commits only if the one before it did, but does not check that
// the session still holds the lock. The check reads pg_locks, which copies
// the server's whole lock table (80 µs a transaction with 40 sessions on two
// cores, and a share of every lock partition); what must not happen after a
// loss (a batch recorded, and so sent) goes through Send, and a transaction
// behind a failed one still does nothing.
func (p *Pipe) SendChained(ctx context.Context, queue func(b *pgx.Batch) error) error {
	return p.sendTx(ctx, false, queue)
}

func (p *Pipe) sendTx(ctx context.Context, checked bool, queue func(b *pgx.Batch) error) error {
	b := &pgx.Batch{}
	if err := queue(b); err != nil {
		return err
	}
	if p.lk.locker.stateless {
		return p.sendNow(ctx, b)
	}
	if len(p.sent) == 0 {
		// The window's transactions share one pooled connection: the
		// fence between two is a setting of its session.
		p.lk.mu.Lock()
		if err := p.lk.acquire(ctx); err != nil {
			p.lk.unlockMu()
			return err
		}
	}
	if err := p.send(ctx, checked, b); err != nil {
		if len(p.sent) == 0 {
			p.pl = nil
			p.lk.putBack()
			p.lk.unlockMu()
		}
		return err
	}
	return nil
}

func (p *Pipe) send(ctx context.Context, checked bool, b *pgx.Batch) error {
	if err := p.lk.Err(); err != nil {
		return fmt.Errorf("locks: pipe: %w", err)
	}
	// A statement the session has not prepared is prepared outside
	// pipeline mode, once what is in flight has been read. The statements
	// of an export are few, so this happens in its first transactions.
	head := pipeHeadSQL
	if !checked {
		head = pipeChainSQL
	}
	if err := p.prepare(ctx, head); err != nil {
		return err
	}
	for _, q := range b.QueuedQueries {
		if err := p.prepare(ctx, q.SQL); err != nil {
			return err
		}
	}
	if p.pl == nil {
		p.pl = p.lk.conn.PgConn().StartPipeline(context.Background())
	}

	// Fence on the last transaction sent while its outcome is still unread
	// by the caller: this one must not commit if that one did not.
	var fence *string
	if len(p.sent) > 0 {
		fence = &p.last
	}
	token := newToken()
	args := []any{fence, token}
	if checked {
		classid, objid := pgLocksIDs(p.lk.key)
		args = []any{classid, objid, fenceKey(p.lk.key), p.lk.pid, fence, token}
	}
	if err := p.queue(head, args); err != nil {
		return err
	}
	for _, q := range b.QueuedQueries {
		if err := p.queue(q.SQL, q.Arguments); err != nil {
			return err
		}
	}
	tx := &pipeTx{qs: b.QueuedQueries}
	if d, ok := ctx.Deadline(); ok {
		tx.deadline = d
	}
	stop := p.watch(tx.deadline)
	err := p.pl.Sync()
	stop()
	if err != nil {
		p.pl = nil
		return p.lk.settle(fmt.Errorf("locks: pipe: send: %w", err), "pipe")
	}
	p.sent = append(p.sent, tx)
	p.last = token
	return nil
}

// prepare makes sure the session has sql prepared.
func (p *Pipe) prepare(ctx context.Context, sql string) error {
	if p.lk.prepared[p.lk.conn][sql] != nil {
		return nil
	}
	if err := p.drain(); err != nil {
		return err
	}
	sd, err := p.lk.conn.Prepare(ctx, sql, sql)
	if err != nil {
		return p.lk.settle(fmt.Errorf("locks: pipe: prepare: %w", err), "pipe")
	}
	if p.lk.prepared == nil {
		p.lk.prepared = map[*pgx.Conn]map[string]*pgconn.StatementDescription{}
	}
	if p.lk.prepared[p.lk.conn] == nil {
		p.lk.prepared[p.lk.conn] = map[string]*pgconn.StatementDescription{}
	}
	p.lk.prepared[p.lk.conn][sql] = sd
	return nil
}

// queue encodes one statement into the pipeline's buffer.
func (p *Pipe) queue(sql string, args []any) error {
	sd := p.lk.prepared[p.lk.conn][sql]
	if err := p.args.build(p.lk.conn.TypeMap(), sd, args); err != nil {
		// What was queued before it is in the connection's buffer, and
		// pgconn cannot take it back: the connection goes rather than
		// send half a transaction (the pool discards it, busy), and the
		// lock with it, as a pipe that cannot go on.
		p.pl = nil
		_ = p.lk.conn.PgConn().Conn().Close()
		err = fmt.Errorf("locks: pipe: encode %q: %w", firstLine(sql), err)
		p.lk.lose(err)
		return fmt.Errorf("locks: pipe: %w", p.lk.Err())
	}
	p.pl.SendQueryPrepared(sd.Name, p.args.values, p.args.formats, p.args.results)
	return nil
}

// Receive waits for the oldest transaction sent and not yet received, runs
// its callbacks and returns its error: nil if it committed and every
// callback returned nil. An error wrapping ErrLockLost means the lock is
// gone; one wrapping ErrEarlierFailed, that the transaction before it
// failed, so it did nothing.
func (p *Pipe) Receive() error {
	if len(p.sent) == 0 {
		return errors.New("locks: pipe: nothing in flight to receive")
	}
	if p.lk.locker.stateless {
		return p.receiveNow()
	}
	tx := p.sent[0]
	if !tx.read {
		p.read(tx)
	}
	p.sent = p.sent[1:]
	if len(p.sent) == 0 {
		if p.pl != nil {
			if err := p.pl.Close(); err != nil && tx.err == nil {
				tx.err = p.lk.settle(fmt.Errorf("locks: pipe: close: %w", err), "pipe")
			}
			p.pl = nil
		}
		p.lk.putBack()
		p.lk.unlockMu()
	}
	return tx.err
}

// Close receives whatever is still in flight, discarding the results, so
// the session is free again. A Pipe whose transactions were all received
// needs no Close.
func (p *Pipe) Close() {
	for len(p.sent) > 0 {
		_ = p.Receive()
	}
}

// drain reads the results of every transaction in flight, for Receive to
// return later, and leaves pipeline mode.
func (p *Pipe) drain() error {
	for _, tx := range p.sent {
		if !tx.read {
			p.read(tx)
		}
	}
	if p.pl == nil {
		return nil
	}
	err := p.pl.Close()
	p.pl = nil
	if err != nil {
		return p.lk.settle(fmt.Errorf("locks: pipe: close: %w", err), "pipe")
	}
	return nil
}
