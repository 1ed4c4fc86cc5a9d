package tenants

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/delivery"
)

// The tenants' shared facts, read together (issue 54). Each tenant's
// deliverer reads its facts (another daemon's pause, its open breaker)
// once a second while it sends, before a request: 200 tenants sending
// were 200 queries a second on the daemon's pool of five connections,
// each in a request's way, and as many of the lanes' waits for a
// connection as their reads of rows. A registry's deliverers now read
// through one factsReader: a read asked while another runs waits for the
// next, which reads every namespace asked meanwhile in one query
// (breakerstore.ReadStatesOf). One tenant alone reads as before, at once;
// many read in as many queries as the database's time allows, one at a
// time.

// factsReader reads the facts of many tenants' namespaces, one query at a
// time, each for every namespace asked while the one before ran.
type factsReader struct {
	pool *pgxpool.Pool
	// ctx bounds the reads (the registry's life): a read serves many
	// callers, so none of their contexts ends it.
	ctx context.Context

	mu      sync.Mutex
	running bool
	next    *factsRound // asked and not yet read
	rounds  int         // queries run, for the tests
}

// factsRound is one query's namespaces and, once done is closed, its
// answer.
type factsRound struct {
	want   map[string]struct{}
	done   chan struct{}
	states map[string]breakerstore.State
	err    error
}

// load returns namespace's facts from the next read, which this call
// starts when none runs.
func (fr *factsReader) load(ctx context.Context, namespace string) (breakerstore.State, error) {
	fr.mu.Lock()
	if fr.next == nil {
		fr.next = &factsRound{want: map[string]struct{}{}, done: make(chan struct{})}
	}
	rd := fr.next
	rd.want[namespace] = struct{}{}
	if !fr.running {
		fr.running = true
		fr.next = nil
		go fr.run(rd)
	}
	fr.mu.Unlock()
	select {
	case <-rd.done:
	case <-ctx.Done():
		return breakerstore.State{}, ctx.Err()
	}
	if rd.err != nil {
		return breakerstore.State{}, rd.err
	}
	return rd.states[namespace], nil
}

// run reads rd, then each round asked meanwhile, until none is.
func (fr *factsReader) run(rd *factsRound) {
	for rd != nil {
		namespaces := make([]string, 0, len(rd.want))
		for ns := range rd.want {
			namespaces = append(namespaces, ns)
		}
		ctx, cancel := context.WithTimeout(fr.ctx, breakerstore.TimeoutDefault)
		rd.states, rd.err = breakerstore.ReadStatesOf(ctx, fr.pool, namespaces)
		cancel()
		fr.mu.Lock()
		fr.rounds++
		fr.mu.Unlock()
		close(rd.done)
		fr.mu.Lock()
		rd, fr.next = fr.next, nil
		if rd == nil {
			fr.running = false
		}
		fr.mu.Unlock()
	}
}

// tenantFacts is a tenant deliverer's store: its writes go straight to
// the tenant's namespace (breakerstore.Shared), its reads through the
// registry's factsReader. Reads are not cached here: the deliverer reads
// at most once a second (and Shared's cache, which its writes update, is
// not read).
type tenantFacts struct {
	*breakerstore.Shared
	namespace string
	reader    *factsReader
}

func (t *tenantFacts) Load(ctx context.Context) (breakerstore.State, error) {
	return t.reader.load(ctx, t.namespace)
}

var _ delivery.Store = (*tenantFacts)(nil)
