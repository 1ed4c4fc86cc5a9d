package custom

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"time"

	"github.com/itchyny/gojq"
)

// Every run of a program (request, deletes or response) is bounded twice:
// in time, by program_timeout, and in memory, by what it may allocate.
// gojq has no memory limit of its own, and a time bound alone is no memory
// bound: `[range(.body.n)]` builds tens of millions of values within a
// second, and a program_timeout of a minute lets it build gigabytes.
//
// Both are checked where gojq looks at its context, before every step of
// its machine: the context a program runs under is a budget that counts
// the steps, and every budgetEvery of them reads how many bytes the Go
// runtime has allocated since the program began. Past either bound the
// context is cancelled; gojq's next step sees it, the run ends, and the
// goroutine that ran it goes on (no goroutine is left spinning).
//
// The bytes are the process's, not the program's own (Go keeps no count
// per goroutine): under load another goroutine's allocations count too,
// so the bound is set far above what a program over a 16 MiB body needs,
// and a program stopped by it fails exactly as one past its time does (a
// request program's rows are rendered one by one; a response program's
// answer is no answer, retried). One step of gojq is not interrupted: its
// own caps bound those (a string repeated below 2 GiB, an array index
// below 2^29).

// budgetEvery is how many steps of a program go between two readings of
// the runtime's allocated bytes: a reading costs about a microsecond, a
// step some tens of nanoseconds.
const budgetEvery = 1 << 12

// allocMetric is the runtime's count of bytes allocated since the process
// began.
const allocMetric = "/gc/heap/allocs:bytes"

// errMemoryBound is the cause of a budget cancelled for its bytes.
var errMemoryBound = errors.New("memory bound passed")

// budget is the context a program runs under: its deadline is the time
// bound, and Done, which gojq calls before every step, counts the steps
// and cancels it once the bytes allocated since start pass maxBytes.
type budget struct {
	context.Context
	cancel   context.CancelCauseFunc
	sample   []metrics.Sample
	start    uint64
	maxBytes uint64
	steps    int
}

// newBudget starts the bounds of one run. The caller calls stop when the
// run ends.
func newBudget(timeout time.Duration, maxBytes int) (b *budget, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	tctx, tcancel := context.WithTimeout(ctx, timeout)
	b = &budget{Context: tctx, cancel: cancel, sample: []metrics.Sample{{Name: allocMetric}}, maxBytes: uint64(max(maxBytes, 0))}
	b.start = b.allocated()
	return b, func() { tcancel(); cancel(nil) }
}

// Done counts a step, and now and then weighs the bytes allocated since
// the run began.
func (b *budget) Done() <-chan struct{} {
	b.steps++
	if b.steps%budgetEvery == 0 && b.maxBytes > 0 && b.allocated()-b.start > b.maxBytes {
		b.cancel(errMemoryBound)
	}
	return b.Context.Done()
}

func (b *budget) allocated() uint64 {
	metrics.Read(b.sample)
	if b.sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return b.sample[0].Value.Uint64()
}

// overrun says which bound a run passed, or nil when it passed none.
func (b *budget) overrun(timeout time.Duration) error {
	switch {
	case b.Err() == nil:
		return nil
	case errors.Is(context.Cause(b), errMemoryBound):
		return fmt.Errorf("allocated past its bound of %d MiB (%s)", b.maxBytes>>20, memoryBoundName)
	default:
		return fmt.Errorf("ran past its bound of %s (program_timeout)", timeout)
	}
}

// memoryBoundName names the memory bound in errors and docs.
const memoryBoundName = "the program memory bound"

// bounds are a program's two bounds.
type bounds struct {
	timeout  time.Duration
	maxBytes int
}

// one runs code on in under bounds and returns its one output; it does not
// look for a second one.
func (bd bounds) one(code *gojq.Code, in any, now float64, t *tenantBinding, field string) (any, error) {
	b, stop := newBudget(bd.timeout, bd.maxBytes)
	defer stop()
	v, ok := code.RunWithContext(b, in, now, t.value()).Next()
	if err := b.overrun(bd.timeout); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if !ok {
		return nil, fmt.Errorf("%s: gives no output", field)
	}
	if err, ok := v.(error); ok {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return v, nil
}
