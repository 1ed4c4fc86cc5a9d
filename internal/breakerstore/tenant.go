package breakerstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sony/gobreaker/v2"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// TenantNamespace is the namespace of one tenant's facts at destination
// name (docs/protocol.md section 10): its breaker, learnt rate, refusal,
// pause, hold and probe, under keys "destination:<name>/tenant:<tenant>:<key>"
// in syncer_state. Every tenant's facts stand apart from the
// destination's own and from every other tenant's, so a person's pause of
// one tenant (syncer pause --destination crm --tenant acme) is a hold in
// that namespace, and the tenant's deliverer honours it as a destination
// honours its own. Keys are read whole, never by prefix, so a tenant's
// value may hold any character. The form is tenant.Namespace's.
func TenantNamespace(name string, t tenant.Tenant) string {
	return tenant.Namespace(name, t)
}

// KeyConnection holds a Connection: whether a tenant has a usable
// connection row. Only a tenant's namespace has it.
const KeyConnection = "connection"

// Connection says whether the tenants query gave a tenant a usable row, as
// the last daemon to ask found it. A tenant with none is unconnected: its
// rows wait. Error is the registry's text for it (never a secret: it names
// the destination, the tenant and what is wrong, not the row's values).
// Kind tells an unconnected tenant's state apart: "" (no usable row),
// TenantError (the query failed for it) or TenantInvalid (its value is
// never sent); a syncer that predates Kind reads them all as unconnected,
// which they also are: their rows wait.
type Connection struct {
	Unconnected bool      `json:"unconnected"`
	Kind        string    `json:"kind,omitempty"`
	Error       string    `json:"error,omitempty"`
	Since       time.Time `json:"since,omitzero"`
}

// SetConnection records a tenant's Connection; Since is set to now when
// zero. A connected tenant's fact is deleted rather than written, so the
// thousands of connected tenants hold no row for it. Callers write on a
// change only, so a tenant costs no write per batch.
func (s *Store) SetConnection(ctx context.Context, c Connection) error {
	if !c.Unconnected {
		ctx, cancel := s.bounded(ctx)
		defer cancel()
		if _, err := s.pool.Exec(ctx, `DELETE FROM syncer_state WHERE key = $1`, s.prefix+KeyConnection); err != nil {
			return fmt.Errorf("breakerstore: set %s: %w", KeyConnection, err)
		}
		return nil
	}
	if c.Since.IsZero() {
		c.Since = s.now().UTC()
	}
	return s.put(ctx, KeyConnection, c)
}

// Tenant states (docs/protocol.md section 10, "Seen and acted on").
const (
	TenantOK          = "ok"
	TenantUnconnected = "unconnected"
	TenantRefused     = "refused"
	TenantPaused      = "paused"
	TenantLimited     = "limited"
	// TenantError is a tenant whose tenants query failed (its error's
	// SQLSTATE and condition name, never PostgreSQL's message): its rows
	// wait.
	TenantError = "error"
	// TenantInvalid is a tenant whose value can never be sent (empty, "."
	// or "..", or holding a control character): its rows wait.
	TenantInvalid = "invalid"
)

// TenantStates are the states a tenant can be in, in the order status
// lists them.
var TenantStates = []string{TenantOK, TenantUnconnected, TenantRefused, TenantPaused, TenantLimited, TenantError, TenantInvalid}

// TenantFacts is one tenant's facts: State and its Connection.
type TenantFacts struct {
	State
	Connection Connection
}

// StateAt names the tenant's state at now and says why in words (never a
// secret: the stored texts went through thirdparty.SafeText). A person's
// pause comes first, then a refusal, then a missing connection row, then
// what limits its pace (a 429's pause, an open breaker).
func (f TenantFacts) StateAt(now time.Time) (state, text string) {
	switch {
	case f.Hold.Paused:
		return TenantPaused, "paused by " + cmp.Or(f.Hold.By, "a person")
	case f.Credentials.Refused:
		return TenantRefused, f.Credentials.Message
	case f.Configuration.Refused:
		return TenantRefused, f.Configuration.Message
	case f.Connection.Unconnected && (f.Connection.Kind == TenantError || f.Connection.Kind == TenantInvalid):
		return f.Connection.Kind, f.Connection.Error
	case f.Connection.Unconnected:
		return TenantUnconnected, f.Connection.Error
	case f.Pause.Active(now):
		return TenantLimited, f.Pause.Cause
	case f.Breaker.Current(now) == gobreaker.StateOpen:
		return TenantLimited, f.LastError.Text
	}
	return TenantOK, ""
}

// ReadTenants reads the facts of every tenant of destination name that has
// any, by tenant, in one query. It reads the destination's tenant keys by
// their prefix: a scan of syncer_state, which holds a handful of keys per
// tenant (3,000 tenants are some 30,000 small rows, read in milliseconds),
// cheaper than asking per tenant. A tenant's value may hold any
// character: each key is split at its known suffix, never at a separator.
func ReadTenants(ctx context.Context, q database.Querier, name string) (map[string]*TenantFacts, error) {
	prefix := tenant.NamespacePrefix(name)
	rows, err := q.Query(ctx, `SELECT substr(key, $2), value FROM syncer_state WHERE starts_with(key, $1)`, prefix, len(prefix)+1)
	if err != nil {
		return nil, fmt.Errorf("breakerstore: read tenants of %s: %w", name, err)
	}
	out, err := tenantFacts(rows)
	if err != nil {
		return nil, fmt.Errorf("breakerstore: read tenants of %s: %w", name, err)
	}
	return out, nil
}

// ReadTenantsCounted reads what CountTenants needs of destination name's
// tenants, where tenants are those with rows (its pending map's): every
// fact of each of them, by their whole keys, and the hold of every other
// tenant (a tenant without rows is counted only while paused,
// TenantFacts.Counted). ReadTenants decoded every tenant's facts: 10,000
// idle tenants' were a fifth of an idle daemon's CPU, read every 30 s for
// the gauges (issue 54). Only KeyHold ends in ":hold", so the suffix picks
// out the holds whatever the tenants' values.
func ReadTenantsCounted(ctx context.Context, q database.Querier, name string, tenants []string) (map[string]*TenantFacts, error) {
	prefix := TenantNamespace(name, "")
	keys := make([]string, 0, len(tenants)*len(tenantKeys))
	for _, t := range tenants {
		for _, k := range tenantKeys {
			keys = append(keys, keyPrefix(TenantNamespace(name, tenant.Tenant(t)))+k)
		}
	}
	rows, err := q.Query(ctx, `SELECT substr(key, $2), value FROM syncer_state WHERE key = ANY($3)
		UNION ALL
		SELECT substr(key, $2), value FROM syncer_state WHERE starts_with(key, $1) AND right(key, $4) = $5 AND NOT key = ANY($3)`,
		prefix, len(prefix)+1, keys, len(KeyHold)+1, ":"+KeyHold)
	if err != nil {
		return nil, fmt.Errorf("breakerstore: read tenants of %s: %w", name, err)
	}
	out, err := tenantFacts(rows)
	if err != nil {
		return nil, fmt.Errorf("breakerstore: read tenants of %s: %w", name, err)
	}
	return out, nil
}

// tenantFacts decodes rows of (key less the destination's tenant prefix,
// value) by tenant, each key split at its known suffix.
func tenantFacts(rows pgx.Rows) (map[string]*TenantFacts, error) {
	out := map[string]*TenantFacts{}
	var rest string
	var value []byte
	_, err := pgx.ForEachRow(rows, []any{&rest, &value}, func() error {
		for _, k := range tenantKeys {
			tenant, ok := strings.CutSuffix(rest, ":"+k)
			if !ok {
				continue
			}
			f := out[tenant]
			if f == nil {
				f = &TenantFacts{}
				out[tenant] = f
			}
			f.decode(k, value)
			return nil
		}
		return nil
	})
	return out, err
}

// ReadTenant reads one tenant's facts by their keys.
func ReadTenant(ctx context.Context, q database.Querier, name string, t tenant.Tenant) (TenantFacts, error) {
	var f TenantFacts
	st, err := ReadStateOf(ctx, q, TenantNamespace(name, t))
	if err != nil {
		return f, err
	}
	f.State = st
	var data []byte
	err = q.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1`, keyPrefix(TenantNamespace(name, t))+KeyConnection).Scan(&data)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return f, fmt.Errorf("breakerstore: read %s: %w", KeyConnection, err)
	}
	if data != nil {
		decode(data, &f.Connection)
	}
	return f, nil
}

// tenantKeys are the keys a tenant is known and its state told from
// (none is a suffix of another, so no key is taken for another).
var tenantKeys = []string{KeyBreaker, KeyConfiguration, KeyCredentials, KeyConnection, KeyLastError, KeyPause, KeyHold, KeyRate}

func (f *TenantFacts) decode(key string, v []byte) {
	switch key {
	case KeyBreaker:
		decode(v, &f.Breaker)
	case KeyCredentials:
		decode(v, &f.Credentials)
	case KeyConfiguration:
		decode(v, &f.Configuration)
	case KeyConnection:
		decode(v, &f.Connection)
	case KeyLastError:
		decode(v, &f.LastError)
	case KeyPause:
		decode(v, &f.Pause)
	case KeyHold:
		decode(v, &f.Hold)
	case KeyRate:
		decode(v, &f.Rate)
	}
}

// TenantKnown reports whether syncer keeps any fact of tenant at
// destination name (a connection fact, a hold, a refusal...), read by the
// facts' whole keys.
func TenantKnown(ctx context.Context, q database.Querier, name string, t tenant.Tenant) (bool, error) {
	prefix := keyPrefix(TenantNamespace(name, t))
	keys := make([]string, len(tenantKeys))
	for i, k := range tenantKeys {
		keys[i] = prefix + k
	}
	var found bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM syncer_state WHERE key = ANY($1))`, keys).Scan(&found); err != nil {
		return false, fmt.Errorf("breakerstore: tenant %s of %s: %w", t, name, err)
	}
	return found, nil
}

// TidyTenants deletes what is kept of the tenants of destination name
// that are gone (docs/design.md, "Tenants that come and go"): every key
// of a tenant none of whose facts was written since before, that has no
// person's pause, and that busy does not name (the caller's tenants with
// rows pending or failed). A key written after before is never deleted,
// so a tenant that comes back while the tidy runs keeps what it wrote.
// It returns how many tenants it deleted.
func TidyTenants(ctx context.Context, q database.Querier, name string, before time.Time, busy func(tenant string) bool) (int, error) {
	prefix := tenant.NamespacePrefix(name)
	rows, err := q.Query(ctx, `SELECT substr(key, $2), value, updated_at FROM syncer_state WHERE starts_with(key, $1)`, prefix, len(prefix)+1)
	if err != nil {
		return 0, fmt.Errorf("breakerstore: tidy tenants of %s: %w", name, err)
	}
	type kept struct {
		keys   []string
		newest time.Time
		held   bool
	}
	byTenant := map[string]*kept{}
	var rest string
	var value []byte
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&rest, &value, &at}, func() error {
		for _, k := range tidyKeys {
			tenant, ok := strings.CutSuffix(rest, ":"+k)
			if !ok {
				continue
			}
			t := byTenant[tenant]
			if t == nil {
				t = &kept{}
				byTenant[tenant] = t
			}
			t.keys = append(t.keys, prefix+rest)
			if at.After(t.newest) {
				t.newest = at
			}
			if k == KeyHold {
				var h Hold
				decode(value, &h)
				t.held = h.Paused
			}
			return nil
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("breakerstore: tidy tenants of %s: %w", name, err)
	}
	var keys []string
	n := 0
	for tenant, t := range byTenant {
		if t.held || !t.newest.Before(before) || busy(tenant) {
			continue
		}
		keys = append(keys, t.keys...)
		n++
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if _, err := q.Exec(ctx, `DELETE FROM syncer_state WHERE key = ANY($1) AND updated_at < $2`, keys, before); err != nil {
		return 0, fmt.Errorf("breakerstore: tidy tenants of %s: %w", name, err)
	}
	return n, nil
}

// tidyKeys are every key a tenant's namespace may hold: TidyTenants
// deletes them all. A suffix of one is never another's whole suffix
// after a ':' ("probe" and "probe_answer" end differently).
var tidyKeys = append(append([]string{}, allKeys...), KeyConnection, KeyAccount)
