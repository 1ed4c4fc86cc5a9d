package delivery

import (
	"errors"
	"sync"

	"github.com/sony/gobreaker/v2"
)

// memStore keeps the breaker's state in this process, for a Deliverer built
// without a shared store (tests, a one-off command).
type memStore struct {
	mu     sync.Mutex
	data   map[string][]byte
	locked map[string]bool
}

var _ gobreaker.SharedDataStore = (*memStore)(nil)

var errMemLocked = errors.New("delivery: breaker mutex held")

func newMemStore() *memStore {
	return &memStore{data: map[string][]byte{}, locked: map[string]bool{}}
}

func (s *memStore) Lock(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locked[name] {
		return errMemLocked
	}
	s.locked[name] = true
	return nil
}

func (s *memStore) Unlock(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locked, name)
	return nil
}

func (s *memStore) GetData(name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[name], nil
}

func (s *memStore) SetData(name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[name] = append([]byte(nil), data...)
	return nil
}
