package tenants

import (
	"crypto/rand"
	"slices"
	"sync"
)

// spentKept is how many refresh tokens a process remembers having spent.
const spentKept = 8

// tokenMemory is what one process knows of a tenant's refresh tokens
// beyond its row: the token it holds and those it spent. A row that still
// gives a spent one (no on_refresh, or its store is still being retried)
// is answered with the token held, never spent again.
type tokenMemory struct {
	mu       sync.Mutex
	refresh  string   // the newest token this process holds
	spent    []string // tokens it spent, newest last
	unstored bool     // refresh was rotated to and not stored: only this process has it
	storing  bool     // a goroutine retries storing refresh (refreshGrant.keepStoring)
	warned   bool     // the missing on_refresh was logged
	// owner names this process's claims of the tenant's grants
	// (refreshGrant.claim); claimed says one may be in the table, and
	// granting counts this process's grants between their claim and
	// their end, while which no claim of it is released by keepStoring.
	owner    string
	claimed  bool
	granting int
}

// ownerID is this process's name in the tenant's claims, made at first
// use.
func (m *tokenMemory) ownerID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner == "" {
		m.owner = rand.Text()
	}
	return m.owner
}

// beginGrant counts a grant of this process until endGrant.
func (m *tokenMemory) beginGrant() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.granting++
}

// markClaimed records that a claim of this process may be in the table
// from now on.
func (m *tokenMemory) markClaimed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claimed = true
}

// endGrant counts the grant's end; released says its claim is gone.
func (m *tokenMemory) endGrant(released bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.granting--
	if released && m.granting == 0 {
		m.claimed = false
	}
}

// releasable reports whether this process's claim may be released (no
// grant of it in flight), and whether one may be in the table.
func (m *tokenMemory) releasable() (ok, claimed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.granting == 0, m.claimed
}

// released records that this process's claim is gone, unless a grant
// of it began since.
func (m *tokenMemory) released() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.granting == 0 {
		m.claimed = false
	}
}

// choose is the token to spend when stored is the one stored now, and
// whether it is that one.
func (m *tokenMemory) choose(stored string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refresh != "" && slices.Contains(m.spent, stored) {
		return m.refresh, false
	}
	return stored, true
}

// rotated records that the endpoint took used and answered next: used is
// dead at the endpoint from now on, whatever becomes of the transaction
// that asked, and next is this process's alone until it is stored. It is
// called under the tenant's refresh lock, so that a store retried by this
// process (which takes the lock too) never stores a token already spent.
func (m *tokenMemory) rotated(used, next string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.spent, used) {
		m.spent = append(m.spent, used)
		if len(m.spent) > spentKept {
			m.spent = m.spent[len(m.spent)-spentKept:]
		}
	}
	m.refresh, m.unstored = next, true
}

// kept records a grant that did not rotate used; fromRow says used is the
// token the row gives, so no other is held unstored.
func (m *tokenMemory) kept(used string, fromRow bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refresh = used
	if fromRow {
		m.unstored = false
	}
}

// stored records that the row gives tok, or a token newer than it (one
// stored by someone else since): when tok is still the token held, the
// process holds nothing the others cannot read.
func (m *tokenMemory) stored(tok string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refresh == tok {
		m.unstored = false
	}
}

// pending is the token held and those spent, for a compare-and-store, and
// whether the held one still waits to be stored.
func (m *tokenMemory) pending() (held string, spent []string, unstored bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refresh, slices.Clone(m.spent), m.unstored
}

// startStoring reports whether the caller is to start the goroutine that
// stores the held token: false when one runs already (it stores whatever
// token is held when it next tries).
func (m *tokenMemory) startStoring() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.storing {
		return false
	}
	m.storing = true
	return true
}

// doneStoring reports whether the storing goroutine may end: the token
// held is stored (or superseded), and no claim of this process is left. Checked and cleared under one lock, so
// that a token rotated to meanwhile is never left without a goroutine.
// storable says a token held unstored can be stored (on_refresh is set).
func (m *tokenMemory) doneStoring(storable bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if (m.unstored && storable) || m.claimed {
		return false
	}
	m.storing = false
	return true
}

// stopStoring ends the storing goroutine without its store.
func (m *tokenMemory) stopStoring() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.storing = false
}

// knows reports whether refresh is the token held or one spent: a row
// that gives either has not changed its connection.
func (m *tokenMemory) knows(refresh string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return refresh == m.refresh || slices.Contains(m.spent, refresh)
}

// held reports whether only this process holds the tenant's newest
// token: forgetting it would cut the tenant off.
func (m *tokenMemory) held() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unstored
}

// tokens are every refresh token known, for scrubbing.
func (m *tokenMemory) tokens() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string{m.refresh}, m.spent...)
}

// warnOnce reports whether the missing on_refresh is yet to be logged.
func (m *tokenMemory) warnOnce() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	first := !m.warned
	m.warned = true
	return first
}
