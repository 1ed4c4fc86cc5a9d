package breakerstore

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// RefreshDefault is how old a Shared's view of the state may be before it
// looks at the database again.
const RefreshDefault = time.Second

// Shared is the gobreaker.SharedDataStore the daemon uses: the breaker's
// state, shared through the Store, without a database round trip per
// request.
//
// gobreaker's distributed breaker reads, locks and writes its store around
// every request, and its counts change with every request. Written through
// to PostgreSQL, that is several round trips and an fsync per batch, which
// halved the drain rate. But only the holder of the export lock pushes, so
// there is one writer at a time, and what another daemon must see at a lock
// handover is the state (closed, open until T, half-open), not the counts.
// So Shared:
//   - keeps the data in memory and writes it to the Store only when the
//     state, its generation or its expiry change;
//   - reads the Store again after Refresh, and takes its data when another
//     daemon changed the state meanwhile;
//   - serialises Lock with a mutex of this process: the export lock already
//     serialises pushers across processes.
type Shared struct {
	store   *Store
	refresh time.Duration
	now     func() time.Time

	locks sync.Map // name -> *sync.Mutex

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	data      []byte
	persisted string // stateOf the data last read from or written to the Store
	fetched   time.Time
}

var _ gobreaker.SharedDataStore = (*Shared)(nil)

// NewShared wraps store. refresh 0 means RefreshDefault.
func NewShared(store *Store, refresh time.Duration) *Shared {
	if refresh <= 0 {
		refresh = RefreshDefault
	}
	return &Shared{store: store, refresh: refresh, now: time.Now, entries: map[string]*entry{}}
}

func (s *Shared) mutex(name string) *sync.Mutex {
	m, _ := s.locks.LoadOrStore(name, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// Lock takes the process-wide mutex name.
func (s *Shared) Lock(name string) error {
	s.mutex(name).Lock()
	return nil
}

// Unlock releases it.
func (s *Shared) Unlock(name string) error {
	s.mutex(name).Unlock()
	return nil
}

// GetData returns the current data of name.
func (s *Shared) GetData(name string) ([]byte, error) {
	s.mu.Lock()
	e := s.entries[name]
	if e != nil && s.now().Sub(e.fetched) < s.refresh {
		data := e.data
		s.mu.Unlock()
		return data, nil
	}
	s.mu.Unlock()

	data, err := s.store.GetData(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e = s.entries[name]
	if e == nil {
		e = &entry{}
		s.entries[name] = e
	}
	if st := stateOf(data); e.data == nil || st != e.persisted {
		// First look, or another daemon changed the state: theirs wins.
		e.data, e.persisted = data, st
	}
	e.fetched = s.now()
	return e.data, nil
}

// SetData records data, and writes it to the Store when the state changed.
func (s *Shared) SetData(name string, data []byte) error {
	st := stateOf(data)
	s.mu.Lock()
	e := s.entries[name]
	if e == nil {
		e = &entry{fetched: s.now()}
		s.entries[name] = e
	}
	e.data = data
	changed := st != e.persisted
	s.mu.Unlock()
	if !changed {
		return nil
	}
	if err := s.store.SetData(name, data); err != nil {
		return err
	}
	s.mu.Lock()
	e.persisted = st
	s.mu.Unlock()
	return nil
}

// stateOf is what of the breaker's data other daemons must see.
func stateOf(data []byte) string {
	var st struct {
		State      int       `json:"state"`
		Generation uint64    `json:"generation"`
		Expiry     time.Time `json:"expiry"`
	}
	if len(data) == 0 || json.Unmarshal(data, &st) != nil {
		return string(data)
	}
	b, _ := json.Marshal(st)
	return string(b)
}
