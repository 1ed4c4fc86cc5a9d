// Package breakerstore owns the facts about the third party that every
// daemon must share, kept in PostgreSQL's syncer_state table: the circuit
// breaker's state, whether the third party refuses our credentials or our
// configuration (a redirect, 404, 410), a pause it asked for (429,
// exhausted quota), the request rate syncer learnt, and the last error.
//
// What it guarantees:
//
//   - One owner. Every key of these facts, their Go types and their
//     decoding live here; the delivery package writes them, `syncer status`
//     and the daemon's gauges read them with ReadState. The breaker's row
//     keeps gobreaker's SharedState layout and its State type, so a row
//     written by an older syncer still reads.
//   - They outlive the process. A daemon that takes the export lock over
//     reads what its predecessor learnt: an open breaker is not probed
//     before its expiry (and past it, one probe goes, not a fresh count of
//     failures), a pause is not cut short, the learnt rate (with its
//     ceiling and phase) is not learnt again by hammering the third party.
//   - Per destination. A Store made with Config.Namespace keeps one
//     destination's facts under keys of its own; the resources'
//     destination uses the unprefixed keys.
//   - Writes are single upserts (a refusal is a read-modify-write in one
//     transaction, so its transition is reported once across daemons). Only
//     the export lock's holder writes, so there is one writer at a time.
//   - Nothing stored holds a secret: callers store text that went through
//     thirdparty.SafeText.
package breakerstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"

	"github.com/syncer-dev/syncer/internal/database"
)

// TimeoutDefault bounds each database call of a Store made without a
// deadline of the caller's.
const TimeoutDefault = 5 * time.Second

// Keys of syncer_state owned by this package.
const (
	// KeyBreaker holds the circuit breaker's state as gobreaker's
	// SharedState ("gobreaker:state:" + the breaker's name).
	KeyBreaker = "gobreaker:state:thirdparty"
	// KeyCredentials holds a Refusal: 401 or 403.
	KeyCredentials = "credentials"
	// KeyConfiguration holds a Refusal: a redirect, 404 or 410.
	KeyConfiguration = "configuration"
	// KeyPause holds a Pause: 429 with Retry-After, or a quota used up.
	KeyPause = "pause"
	// KeyRate holds the learnt Rate.
	KeyRate = "rate"
	// KeyLastError holds the LastError.
	KeyLastError = "last_error"
)

var allKeys = []string{KeyBreaker, KeyCredentials, KeyConfiguration, KeyPause, KeyRate, KeyLastError, KeyHold, KeyProbe, KeyCertificates, KeyProbeAnswer, KeyVerifyShare}

// Breaker is the circuit breaker's state as stored: gobreaker's SharedState
// without the counts, which only the process that counts needs.
type Breaker struct {
	State      gobreaker.State `json:"state"`
	Generation uint64          `json:"generation"`
	// Expiry is when an open breaker lets a probe through.
	Expiry time.Time `json:"expiry"`
}

// Current is the state at now: an open breaker whose expiry has passed is
// half-open (the breaker itself notes that only at its next request).
func (b Breaker) Current(now time.Time) gobreaker.State {
	if b.State == gobreaker.StateOpen && !b.Expiry.IsZero() && !b.Expiry.After(now) {
		return gobreaker.StateHalfOpen
	}
	return b.State
}

// OpenUntil is when an open breaker lets a probe through; zero when it is
// not open at now.
func (b Breaker) OpenUntil(now time.Time) time.Time {
	if b.Current(now) != gobreaker.StateOpen {
		return time.Time{}
	}
	return b.Expiry
}

// Refusal is a standing refusal by the third party that no retry cures:
// bad credentials, or a URL that redirects or does not exist.
type Refusal struct {
	Refused bool `json:"refused"`
	// Status is the HTTP status that said so.
	Status int `json:"status,omitempty"`
	// Message says what happened, with an excerpt of the answer.
	Message string `json:"message,omitempty"`
	// Since is when the refusal (or its end) was first recorded.
	Since time.Time `json:"since,omitzero"`
	// TokenEndpoint is set when the refusal is the credentials' token
	// endpoint's (an OAuth2 grant's), not the destination's: its URL
	// without secrets. Status is then the endpoint's.
	TokenEndpoint string `json:"token_endpoint,omitempty"`
}

// Credentials is the credentials' Refusal, by its former name.
type Credentials = Refusal

// Pause is a time before which nothing is sent to the third party.
type Pause struct {
	Until time.Time `json:"until"`
	// Cause says who asked for it: "429 Retry-After: 30" or "quota used
	// up".
	Cause string `json:"cause,omitempty"`
	// Status is the HTTP status of the answer that asked for it.
	Status int `json:"status,omitempty"`
}

// Active reports whether the pause still holds at now.
func (p Pause) Active(now time.Time) bool { return p.Until.After(now) }

// Rate is the request rate learnt from the third party's bare 429s.
type Rate struct {
	// Limit is the requests a second allowed now; 0 means none learnt (no
	// limit but the configured one).
	Limit float64 `json:"limit"`
	// Ceiling is the rate at which the last 429 came: the third party's
	// limit as far as syncer knows. 0 when unknown: in slow start, Limit
	// doubles every second until a 429 sets it.
	Ceiling float64 `json:"ceiling,omitempty"`
	// Phase says how the rate moves: "slow start" (no ceiling yet: it
	// doubles while nothing is refused) or "probing" (held near Ceiling
	// and probing past it). Empty in a row written by an older syncer.
	Phase string `json:"phase,omitempty"`
	// UpdatedAt is when Limit was last written.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// LastError is the last failure of a request to the third party.
type LastError struct {
	// Text is a bounded, escaped, token-free description.
	Text string `json:"text"`
	// Status is the answer's HTTP status; 0 when no answer came.
	Status int `json:"status,omitempty"`
	// At is when it happened.
	At time.Time `json:"at"`
}

// State is every fact of this package, as ReadState returns it. A fact never
// recorded is its zero value.
type State struct {
	Breaker       Breaker
	Credentials   Refusal
	Configuration Refusal
	Pause         Pause
	Rate          Rate
	LastError     LastError
	Hold          Hold
	Certificates  Certificates
	Probe         Probe
	ProbeAnswer   ProbeAnswer
	VerifyShare   VerifyShare
}

// Stops reports whether the facts stop every batch to the destination at
// now: a person's pause (Hold), refused credentials or configuration, an
// open breaker, or a pause the third party asked for. The daemon's
// syncer_source_stopped asks it; status says the same facts in words
// (status.Destination.Stopped), so the two must agree.
func (s State) Stops(now time.Time) bool {
	return s.Hold.Paused || s.Credentials.Refused || s.Configuration.Refused ||
		s.Breaker.Current(now) == gobreaker.StateOpen || s.Pause.Active(now)
}

// ReadState reads every fact of this package in one query. A value that
// does not decode reads as never recorded rather than failing the reader:
// `syncer status` must work even after a bad write.
func ReadState(ctx context.Context, q database.Querier) (State, error) {
	return ReadStateOf(ctx, q, "")
}

// ReadStateOf is ReadState of the facts of one namespace (Config.Namespace):
// a configured destination's.
func ReadStateOf(ctx context.Context, q database.Querier, namespace string) (State, error) {
	var st State
	prefix := keyPrefix(namespace)
	keys := make([]string, len(allKeys))
	for i, k := range allKeys {
		keys[i] = prefix + k
	}
	rows, err := q.Query(ctx, `SELECT substr(key, $2), value FROM syncer_state WHERE key = ANY($1)`, keys, len(prefix)+1)
	if err != nil {
		return st, fmt.Errorf("breakerstore: read state: %w", err)
	}
	into := map[string]func([]byte){
		KeyBreaker:       func(v []byte) { decode(v, &st.Breaker) },
		KeyCredentials:   func(v []byte) { decode(v, &st.Credentials) },
		KeyConfiguration: func(v []byte) { decode(v, &st.Configuration) },
		KeyPause:         func(v []byte) { decode(v, &st.Pause) },
		KeyRate:          func(v []byte) { decode(v, &st.Rate) },
		KeyLastError:     func(v []byte) { decode(v, &st.LastError) },
		KeyHold:          func(v []byte) { decode(v, &st.Hold) },
		KeyCertificates:  func(v []byte) { decode(v, &st.Certificates) },
		KeyProbe:         func(v []byte) { decode(v, &st.Probe) },
		KeyProbeAnswer:   func(v []byte) { decode(v, &st.ProbeAnswer) },
		KeyVerifyShare:   func(v []byte) { decode(v, &st.VerifyShare) },
	}
	var key string
	var value []byte
	_, err = pgx.ForEachRow(rows, []any{&key, &value}, func() error {
		if f, ok := into[key]; ok {
			f(value)
		}
		return nil
	})
	if err != nil {
		return State{}, fmt.Errorf("breakerstore: read state: %w", err)
	}
	return st, nil
}

// decode reads value into dst, leaving dst zero when it does not decode.
func decode[T any](value []byte, dst *T) {
	var v T
	if json.Unmarshal(value, &v) == nil {
		*dst = v
	}
}

// Config configures a Store.
type Config struct {
	// Timeout bounds each database call made under a context without a
	// deadline. Defaults to TimeoutDefault.
	Timeout time.Duration
	// Schema is unused; it scoped the advisory locks of gobreaker's mutex,
	// which the breaker no longer takes. Defaults to "".
	Schema string
	// Namespace keeps the facts of one third party apart from another's:
	// a configured destination's facts are stored under keys prefixed with
	// it. The default, the resources' destination, keeps the keys
	// unprefixed. Defaults to "".
	Namespace string
}

// keyPrefix is what a namespace puts before every key.
func keyPrefix(namespace string) string {
	if namespace == "" {
		return ""
	}
	return namespace + ":"
}

func (c *Config) validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("breakerstore: config: Timeout must not be negative, got %s", c.Timeout)
	}
	return nil
}

// Store reads and writes the facts in syncer_state. It is safe for
// concurrent use.
type Store struct {
	prefix  string
	pool    *pgxpool.Pool
	timeout time.Duration
	now     func() time.Time
}

// New returns a Store on pool, whose search_path finds syncer_state.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("breakerstore: pool is required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Store{prefix: keyPrefix(cfg.Namespace), pool: pool, timeout: cmp.Or(cfg.Timeout, TimeoutDefault), now: time.Now}, nil
}

// bounded gives ctx a deadline of s.timeout unless it has one.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// Load reads every fact (ReadState).
func (s *Store) Load(ctx context.Context) (State, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return ReadStateOf(ctx, s.pool, strings.TrimSuffix(s.prefix, ":"))
}

// SetBreaker records the breaker's state.
func (s *Store) SetBreaker(ctx context.Context, b Breaker) error { return s.put(ctx, KeyBreaker, b) }

// SetPause records a pause.
func (s *Store) SetPause(ctx context.Context, p Pause) error { return s.put(ctx, KeyPause, p) }

// SetRate records the learnt rate; UpdatedAt is set to now when zero.
func (s *Store) SetRate(ctx context.Context, r Rate) error {
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = s.now().UTC()
	}
	return s.put(ctx, KeyRate, r)
}

// SetLastError records the last error; At is set to now when zero.
func (s *Store) SetLastError(ctx context.Context, e LastError) error {
	if e.At.IsZero() {
		e.At = s.now().UTC()
	}
	return s.put(ctx, KeyLastError, e)
}

func (s *Store) put(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("breakerstore: set %s: %w", key, err)
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	_, err = s.pool.Exec(ctx, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, $2, now())
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`, s.prefix+key, data)
	if err != nil {
		return fmt.Errorf("breakerstore: set %s: %w", key, err)
	}
	return nil
}

// SetRefusal records whether the third party refuses us for the reason
// under key (KeyCredentials or KeyConfiguration), and reports whether that
// changed the recorded fact, so a caller can log a transition once across
// all daemons rather than once per attempt. Since is kept while the fact
// stays the same; Status and Message follow the latest refusal.
func (s *Store) SetRefusal(ctx context.Context, key string, r Refusal) (changed bool, err error) {
	if key != KeyCredentials && key != KeyConfiguration {
		return false, fmt.Errorf("breakerstore: set refusal: unknown key %q", key)
	}
	key = s.prefix + key
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var raw []byte
		err := tx.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1 FOR UPDATE`, key).Scan(&raw)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var prev Refusal
		if raw != nil {
			decode(raw, &prev)
		}
		next := r
		switch {
		case raw == nil && !r.Refused:
			// Nothing recorded and nothing refused: nothing to say.
			return nil
		case raw != nil && prev.Refused == r.Refused:
			if !r.Refused || (prev.Status == r.Status && prev.Message == r.Message) {
				return nil
			}
			next.Since = prev.Since // the same refusal, said differently
		default:
			changed = true
			next.Since = s.now().UTC()
		}
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, $2, now())
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`, key, data)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("breakerstore: set %s: %w", key, err)
	}
	return changed, nil
}

// SetCredentials is SetRefusal of KeyCredentials with a message only.
func (s *Store) SetCredentials(ctx context.Context, refused bool, message string) (changed bool, err error) {
	return s.SetRefusal(ctx, KeyCredentials, Refusal{Refused: refused, Message: message})
}
