package breakerstore

import (
	"context"
	"sync"
	"time"
)

// RefreshDefault is how old a Shared's view of the state may be before it
// reads the database again.
const RefreshDefault = time.Second

// Shared is a Store seen through a short cache: the delivery package asks
// for the shared facts before every request, and a database round trip per
// request would cost more than the request. Load reads the database at most
// once per refresh period (and after every write, what was written is what
// it returns); writes go straight through.
//
// The cache is enough because the facts change rarely and only the holder
// of the export lock writes them: what a process must not miss is another
// daemon's pause or open breaker at a handover, and it sees those within
// one refresh period.
type Shared struct {
	store   *Store
	refresh time.Duration
	now     func() time.Time

	mu      sync.Mutex
	state   State
	fetched time.Time // zero: never read
}

// NewShared wraps store. refresh 0 means RefreshDefault.
func NewShared(store *Store, refresh time.Duration) *Shared {
	if refresh <= 0 {
		refresh = RefreshDefault
	}
	return &Shared{store: store, refresh: refresh, now: time.Now}
}

// Load returns the facts, read from the database if the cached view is
// older than the refresh period.
func (s *Shared) Load(ctx context.Context) (State, error) {
	s.mu.Lock()
	if !s.fetched.IsZero() && s.now().Sub(s.fetched) < s.refresh {
		st := s.state
		s.mu.Unlock()
		return st, nil
	}
	s.mu.Unlock()
	st, err := s.store.Load(ctx)
	if err != nil {
		return State{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.fetched = st, s.now()
	return st, nil
}

// update applies a write to the cached view.
func (s *Shared) update(f func(*State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.state)
}

// SetBreaker records the breaker's state.
func (s *Shared) SetBreaker(ctx context.Context, b Breaker) error {
	if err := s.store.SetBreaker(ctx, b); err != nil {
		return err
	}
	s.update(func(st *State) { st.Breaker = b })
	return nil
}

// SetPause records a pause.
func (s *Shared) SetPause(ctx context.Context, p Pause) error {
	if err := s.store.SetPause(ctx, p); err != nil {
		return err
	}
	s.update(func(st *State) { st.Pause = p })
	return nil
}

// SetRate records the learnt rate.
func (s *Shared) SetRate(ctx context.Context, r Rate) error {
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = s.now().UTC()
	}
	if err := s.store.SetRate(ctx, r); err != nil {
		return err
	}
	s.update(func(st *State) { st.Rate = r })
	return nil
}

// SetLastError records the last error.
func (s *Shared) SetLastError(ctx context.Context, e LastError) error {
	if e.At.IsZero() {
		e.At = s.now().UTC()
	}
	if err := s.store.SetLastError(ctx, e); err != nil {
		return err
	}
	s.update(func(st *State) { st.LastError = e })
	return nil
}

// SetRefusal records a refusal (Store.SetRefusal). The cached view reads
// the database again at the next Load, which gets Since right.
func (s *Shared) SetRefusal(ctx context.Context, key string, r Refusal) (bool, error) {
	changed, err := s.store.SetRefusal(ctx, key, r)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	s.fetched = time.Time{}
	s.mu.Unlock()
	return changed, nil
}

// SetProbeAnswer records the answer to a person's probe
// (Store.SetProbeAnswer).
func (s *Shared) SetProbeAnswer(ctx context.Context, a ProbeAnswer) error {
	if a.At.IsZero() {
		a.At = s.now().UTC()
	}
	if err := s.store.SetProbeAnswer(ctx, a); err != nil {
		return err
	}
	s.update(func(st *State) { st.ProbeAnswer = a })
	return nil
}
