// Package breakerstore keeps facts every daemon must share in PostgreSQL's
// syncer_state table: the circuit breaker's state (as a
// gobreaker.SharedDataStore) and whether the third party refused our
// credentials.
//
// What it guarantees:
//
//   - GetData and SetData read and upsert one row of syncer_state each, so
//     the breaker's state outlives the process: a daemon that takes over the
//     export lock sees an open breaker its predecessor tripped and does not
//     hammer a third party that was seen down.
//   - Lock is a try-lock: a session advisory lock (pg_try_advisory_lock) on a
//     pool connection that the Store holds until Unlock. A session lock,
//     rather than pg_advisory_xact_lock, because gobreaker holds the mutex
//     across the whole HTTP request: a transaction open that long would sit
//     "idle in transaction", while a session lock on an idle connection costs
//     nothing. If the process dies, PostgreSQL ends the session and the lock
//     goes with it, so no lease or expiry is needed; if Unlock cannot release
//     the lock, the connection is closed for the same effect. Lock keys are
//     scoped by schema, so schemas sharing a database do not contend.
//   - The gobreaker interface takes no context, so every call runs under a
//     background context bounded by Config.Timeout.
package breakerstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"

	"github.com/syncer-dev/syncer/internal/locks"
)

// TimeoutDefault bounds each database call of the Store.
const TimeoutDefault = 5 * time.Second

// KeyCredentials is the syncer_state key of the credentials fact. It must
// match status.KeyCredentials.
const KeyCredentials = "credentials"

// LockNamespace is the namespace of the advisory lock keys of Lock.
const LockNamespace = "syncer-breaker"

// ErrLocked is returned by Lock when another session holds the mutex.
// gobreaker retries Lock on any error for a few seconds.
var ErrLocked = errors.New("breakerstore: mutex held elsewhere")

// Config configures a Store.
type Config struct {
	// Schema scopes the advisory lock keys; the table itself is found on
	// the pool's search_path. Defaults to "".
	Schema string
	// Timeout bounds each database call. Defaults to TimeoutDefault.
	Timeout time.Duration
}

// Store is syncer_state as seen by the delivery package.
type Store struct {
	pool    *pgxpool.Pool
	schema  string
	timeout time.Duration

	mu   sync.Mutex
	held map[string]*pgxpool.Conn
}

var _ gobreaker.SharedDataStore = (*Store)(nil)

// New returns a Store on pool.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("breakerstore: pool is required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("breakerstore: config: Timeout must not be negative, got %s", cfg.Timeout)
	}
	return &Store{
		pool:    pool,
		schema:  cfg.Schema,
		timeout: cmp.Or(cfg.Timeout, TimeoutDefault),
		held:    map[string]*pgxpool.Conn{},
	}, nil
}

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// GetData returns the value stored under name, or nil when there is none.
func (s *Store) GetData(name string) ([]byte, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	var v []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1`, name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("breakerstore: get %s: %w", name, err)
	}
	return v, nil
}

// SetData stores data under name.
func (s *Store) SetData(name string, data []byte) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.pool.Exec(ctx, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, $2, now())
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`, name, data)
	if err != nil {
		return fmt.Errorf("breakerstore: set %s: %w", name, err)
	}
	return nil
}

func (s *Store) lockKey(name string) int64 { return locks.Key(LockNamespace, s.schema+":"+name) }

// Lock takes the mutex name without waiting, or returns ErrLocked.
func (s *Store) Lock(name string) error {
	s.mu.Lock()
	_, busy := s.held[name]
	s.mu.Unlock()
	if busy {
		return ErrLocked
	}
	ctx, cancel := s.ctx()
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("breakerstore: lock %s: %w", name, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, s.lockKey(name)).Scan(&ok); err != nil {
		// The lock may have been taken with the answer lost: end the session.
		closeConn(conn)
		return fmt.Errorf("breakerstore: lock %s: %w", name, err)
	}
	if !ok {
		conn.Release()
		return ErrLocked
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.held[name]; busy {
		// Another goroutine of this process won the race with its own
		// connection; give ours back.
		s.unlockConn(conn, name)
		return ErrLocked
	}
	s.held[name] = conn
	return nil
}

// Unlock releases the mutex name taken by Lock.
func (s *Store) Unlock(name string) error {
	s.mu.Lock()
	conn, ok := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("breakerstore: unlock %s: not locked", name)
	}
	return s.unlockConn(conn, name)
}

func (s *Store) unlockConn(conn *pgxpool.Conn, name string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, s.lockKey(name)).Scan(&ok); err != nil || !ok {
		// Ending the session releases whatever it holds.
		closeConn(conn)
		if err == nil {
			err = errors.New("lock was not held")
		}
		return fmt.Errorf("breakerstore: unlock %s: %w", name, err)
	}
	conn.Release()
	return nil
}

func closeConn(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// Credentials is the credentials fact, as `syncer status` reads it.
type Credentials struct {
	Refused bool      `json:"refused"`
	Since   time.Time `json:"since,omitzero"`
	Message string    `json:"message,omitempty"`
}

// SetCredentials records whether the third party refuses our credentials
// and reports whether that changed the recorded fact, so a caller can log a
// transition once across all daemons rather than once per attempt. Since
// is kept while the fact stays the same.
func (s *Store) SetCredentials(ctx context.Context, refused bool, message string) (changed bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var raw []byte
		err := tx.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1 FOR UPDATE`, KeyCredentials).Scan(&raw)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var prev Credentials
		if raw != nil {
			_ = json.Unmarshal(raw, &prev)
		}
		if raw != nil && prev.Refused == refused {
			changed = false
			return nil
		}
		// No row yet and nothing refused: nothing to say, nothing changed.
		if raw == nil && !refused {
			changed = false
			return nil
		}
		changed = true
		next := Credentials{Refused: refused, Since: time.Now().UTC(), Message: message}
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, $2, now())
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`, KeyCredentials, data)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("breakerstore: set credentials: %w", err)
	}
	return changed, nil
}
