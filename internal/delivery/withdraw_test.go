package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Requests withdrawn while they wait for their tokens give every token
// back, whatever order they notice it in: the next request goes when the
// first of them would have. x/time/rate gives a cancelled reservation's
// token back only when no later one is outstanding, and a tenant's
// requests withdrawn at a lane's pass end (issue 54), each cancelled on
// its own, gave back only those cancelled after every later one.
func TestWithdrawnRequestsGiveTheirTokensBack(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	// 1 request/s: the waits are whole seconds of real time, longer
	// than the test takes to withdraw them on a loaded machine.
	p := newPacer(1, 1, func() time.Time { return now })
	ctx := context.Background()
	require.NoError(t, p.wait(ctx), "the token at hand")
	first, ok := p.peek(now)
	require.True(t, ok)
	require.Positive(t, first)

	sig := make(chan struct{})
	const n = 4
	errs := make(chan error, n)
	for range n {
		w := &withdrawal{ch: sig}
		go func() { errs <- p.waitOr(ctx, w) }()
	}
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters) == n
	}, 5*time.Second, time.Millisecond)
	close(sig)
	for range n {
		require.ErrorIs(t, <-errs, ErrWithdrawn)
	}
	next, ok := p.peek(now)
	require.True(t, ok)
	require.InDelta(t, first, next, float64(time.Millisecond), "every withdrawn token given back")
}

// A batch withdrawn sends nothing more, and one of whose requests is
// being sent is never withdrawn: a batch goes whole or not at all.
func TestWithdrawalIsWholeOrNothing(t *testing.T) {
	t.Parallel()
	sig := make(chan struct{})
	w := &withdrawal{ch: sig}
	require.True(t, w.withdraw())
	require.False(t, w.sending(), "withdrawn: nothing of it goes")
	require.True(t, w.withdraw())

	w = &withdrawal{ch: sig}
	require.True(t, w.sending())
	require.False(t, w.withdraw(), "a request of it is being sent")
	require.Nil(t, w.signal(), "its other requests wait for their tokens only")
	require.True(t, w.sending())

	var none *withdrawal
	require.Nil(t, none.signal())
	require.True(t, none.sending())
}
