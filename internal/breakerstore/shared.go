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
//
// A Shared made by Together.Shared reads through it instead, with its
// namespace's neighbours; what it wrote after the read it is given began
// is laid over that read (writes), so its own writes still show at once.
type Shared struct {
	store   *Store
	refresh time.Duration
	now     func() time.Time

	together  *Together
	namespace string

	mu      sync.Mutex
	state   State
	fetched time.Time // zero: never read
	// writes are this process's writes, with when each returned, kept
	// (with together) until a read begun after them was handed out.
	writes []sharedWrite
}

// sharedWrite is one write, as it changes a State.
type sharedWrite struct {
	at    time.Time
	apply func(*State)
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
	if s.together != nil {
		return s.loadTogether(ctx)
	}
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

// loadTogether is Load through s.together: its read, with what this
// process wrote since that read began laid over it. A write that returned
// before the read began is in what the read saw.
func (s *Shared) loadTogether(ctx context.Context) (State, error) {
	st, began, err := s.together.load(ctx, s.namespace)
	if err != nil {
		return State{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.writes[:0]
	for _, w := range s.writes {
		if !w.at.Before(began) {
			w.apply(&st)
			kept = append(kept, w)
		}
	}
	clear(s.writes[len(kept):])
	s.writes = kept
	return st, nil
}

// update applies a write to the cached view (with together, to the reads
// begun before it).
func (s *Shared) update(f func(*State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.together != nil {
		s.writes = append(s.writes, sharedWrite{at: s.now(), apply: f})
		return
	}
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
	if s.together != nil {
		// Since as the store keeps it: the old one unless the fact
		// changed (then this process's clock, until the next read).
		at := s.now().UTC()
		s.update(func(st *State) {
			p := &st.Credentials
			if key == KeyConfiguration {
				p = &st.Configuration
			}
			next := r
			next.Since = p.Since
			if changed || next.Since.IsZero() {
				next.Since = at
			}
			*p = next
		})
		return changed, nil
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
