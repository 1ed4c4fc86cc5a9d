package daemon

import (
	"context"
	"fmt"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// guarded checks, just before every request to a third party, the locks
// the request's context was derived from (locks.CheckContext): a process
// that wakes from a freeze, past its lease, sends nothing more on behalf of
// a lock a waiting daemon may have taken. The refusal is a *WaitError, which
// the deliverer returns at once, neither retried nor counted by the breaker;
// it wraps locks.ErrLockLost, which the job's result looks at first.
type guarded struct{ delivery.Client }

func (g guarded) Send(ctx context.Context, key string, r *thirdparty.Request, read func(*thirdparty.Answer) (*thirdparty.Result, error)) (*thirdparty.Result, error) {
	if err := locks.CheckContext(ctx); err != nil {
		return nil, &delivery.WaitError{Err: fmt.Errorf("daemon: not sent: %w", err)}
	}
	return g.Client.Send(ctx, key, r, read)
}
