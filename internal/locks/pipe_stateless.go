package locks

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A Pipe of a stateless Locker (Config.Stateless: its pool goes through a
// pooler in transaction mode) sends nothing ahead. What the pipelined Pipe
// relies on does not hold there: a pooler may run each implicit
// transaction of one client on another server session, so the token one
// transaction leaves on its session (set_config(..., false)) is not where
// the next one looks, and neither are the statements it prepared
// (PgBouncer before 1.21, or without max_prepared_statements, forwards a
// named statement to whichever server session it picks). So each
// transaction runs as Send is called, as WithTx runs one (BEGIN, the
// lock's fence, the statements, the fence again, COMMIT; in the pool's
// QueryExecModeCacheDescribe, nothing prepared by name), and its result waits for Receive.
// The order the Pipe promises needs no token then: a transaction is not
// run when one sent before it, not yet received, failed. It costs the
// marker its overlap (a round trip a transaction); nothing else changes
// for its callers: Send has encoded and run the transaction when it
// returns, and its callbacks have run, inside the transaction (an error
// of one rolls it back).

// sendNow runs one transaction of a stateless Pipe; its outcome waits in
// p.sent for Receive.
func (p *Pipe) sendNow(ctx context.Context, b *pgx.Batch) error {
	if err := p.lk.Err(); err != nil {
		return fmt.Errorf("locks: pipe: %w", err)
	}
	tx := &pipeTx{qs: b.QueuedQueries, read: true}
	for _, prev := range p.sent {
		if prev.err != nil {
			tx.err = fmt.Errorf("locks: pipe: %w", ErrEarlierFailed)
			p.sent = append(p.sent, tx)
			return nil
		}
	}
	// ctx's cancellation is not watched (see Send), its deadline is.
	rctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(rctx, d)
		defer cancel()
	}
	tx.err = p.lk.WithTx(rctx, func(t pgx.Tx) error {
		return t.SendBatch(rctx, b).Close()
	})
	p.sent = append(p.sent, tx)
	return nil
}

// receiveNow returns the outcome of the oldest transaction of a stateless
// Pipe.
func (p *Pipe) receiveNow() error {
	tx := p.sent[0]
	p.sent = p.sent[1:]
	return tx.err
}
