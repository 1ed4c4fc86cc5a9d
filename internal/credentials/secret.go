// Package credentials holds what a destination proves itself with: its
// secrets (from the environment or from files that rotate under a running
// daemon), the Authorization header of its requests (a bearer token, HTTP
// basic auth, or an OAuth2 client-credentials token fetched and refreshed
// here), and its TLS settings (a private CA, a client certificate). A file
// is read again when it changes, a Kubernetes Secret's symlink swap
// included, and on Reload (SIGHUP); the new value is used from the next
// request and logged by name, never by value.
package credentials

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CheckEveryDefault is how often a file is looked at (one stat) for a
// change, at most: a request in between uses what was read.
const CheckEveryDefault = time.Second

// Secret is one secret of a destination: the value of an environment
// variable, fixed for the process's life, or the content of a file, read
// again when the file changes. It never prints its value.
type Secret struct {
	name string // what it is, for logs: "destination crm: token_file"
	env  string
	file string

	logger *slog.Logger
	epoch  *atomic.Int64 // Reload's counter, shared by every secret of a Set

	mu      sync.Mutex
	value   string
	stat    fileID
	checked time.Time
	seen    int64 // the epoch of the last read
}

// fileID is what tells a file changed: a swapped symlink, a rewrite in
// place or a new inode all change one of these.
type fileID struct {
	size    int64
	modTime time.Time
	ino     uint64
}

func (s *Secret) String() string   { return "[redacted]" }
func (s *Secret) GoString() string { return "[redacted]" }

// LogValue keeps the value out of structured logs.
func (s *Secret) LogValue() slog.Value { return slog.StringValue(s.name) }

// Set makes secrets that reload together (Reload) and log through one
// logger.
type Set struct {
	logger *slog.Logger
	epoch  atomic.Int64
}

// NewSet returns an empty Set; logger may be nil.
func NewSet(logger *slog.Logger) *Set {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Set{logger: logger}
}

// Reload makes every secret of the set read its file again at its next
// use, whatever the file's times say: what SIGHUP does.
func (st *Set) Reload() { st.epoch.Add(1) }

// FromEnv returns a secret read once from the variable env, as getenv
// gives it, spaces trimmed. An unset or empty variable is an error naming
// it.
func (st *Set) FromEnv(name, env string, getenv func(string) string) (*Secret, error) {
	v := strings.TrimSpace(getenv(env))
	if v == "" {
		return nil, fmt.Errorf("%s: environment variable %s is unset or empty", name, env)
	}
	return &Secret{name: name, env: env, value: v, logger: st.logger, epoch: &st.epoch}, nil
}

// FromFile returns a secret read from file now and again whenever the
// file changes. An unreadable or empty file is an error naming it.
func (st *Set) FromFile(name, file string) (*Secret, error) {
	s := &Secret{name: name, file: file, logger: st.logger, epoch: &st.epoch}
	v, id, err := readSecretFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.value, s.stat, s.checked, s.seen = v, id, time.Now(), st.epoch.Load()
	return s, nil
}

// Literal returns a secret of a fixed value (a flag's, a test's).
func Literal(name, value string) *Secret { return &Secret{name: name, value: value} }

// Value returns the secret, read again first when its file changed (looked
// at once a CheckEveryDefault at most) or Reload was called. A file that
// became unreadable or empty keeps the last value, logged once per change.
func (s *Secret) Value() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == "" {
		return s.value
	}
	epoch := s.epoch.Load()
	now := time.Now()
	if epoch == s.seen && now.Sub(s.checked) < CheckEveryDefault {
		return s.value
	}
	s.checked = now
	id, err := statFile(s.file)
	if err == nil && id == s.stat && epoch == s.seen {
		return s.value
	}
	s.seen = epoch
	v, id, err := readSecretFile(s.file)
	if err != nil {
		if s.logger != nil && id != s.stat {
			s.logger.Warn("credentials: could not read a secret's file again; keeping the value read before",
				slog.String("secret", s.name), slog.String("error", err.Error()))
		}
		s.stat = id
		return s.value
	}
	if v != s.value && s.logger != nil {
		s.logger.Info("credentials: a secret's file changed; its new value is used from the next request", slog.String("secret", s.name))
	}
	s.value, s.stat = v, id
	return s.value
}

// File is the file the secret is read from, "" for a variable.
func (s *Secret) File() string { return s.file }

// readSecretFile reads a secret file: one trailing newline (as echo and
// editors write) is not part of it.
func readSecretFile(file string) (string, fileID, error) {
	id, err := statFile(file)
	if err != nil {
		return "", id, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", id, fmt.Errorf("cannot read file %s: %w", file, unwrapPath(err))
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if strings.TrimSpace(v) == "" {
		return "", id, fmt.Errorf("file %s is empty", file)
	}
	return v, id, nil
}
