// Package tenant is a tenant as a type, and every form a tenant's value
// takes in a name syncer stores or sends: the namespace of its shared
// facts, the key of a verify run of its rows, the salt of its batches.
// Each form was made and read back by the package that used it, each
// with its own separator; here each is made and read back in one place.
//
// The forms are kept as they were stored: they are keys of rows already
// in syncer_state and syncer_verify_runs, and a batch's salt is part of
// its Idempotency-Key, which a third party has recorded. Changing one
// would lose a tenant's facts and progress and resend its batches, so
// the forms stay and only their making moves. A lane's name
// (jobs.LaneName, "contacts@3") names a lane of a source, not a tenant,
// and the presence key "source:<name>" a source: neither holds a tenant.
//
// internal/tenants is the registry of the tenants' accounts; this
// package holds no state.
package tenant

import "strings"

// Tenant is a tenant's value, as its source's tenant column gives it in
// text form. The zero Tenant is no tenant: every row of a source.
type Tenant string

// String is the value.
func (t Tenant) String() string { return string(t) }

// IsZero reports whether t is no tenant.
func (t Tenant) IsZero() bool { return t == "" }

// namespaceSep joins a destination's namespace and a tenant's.
const namespaceSep = "/tenant:"

// Namespace is the namespace of t's shared facts at destination dest
// (internal/breakerstore): "destination:<dest>/tenant:<t>". Keys under it
// are read whole or split at their known suffix, never at a separator, so
// a tenant's value may hold any character.
func Namespace(dest string, t Tenant) string {
	return NamespacePrefix(dest) + string(t)
}

// NamespacePrefix is what every tenant's namespace of dest starts with,
// for a read of them all by prefix; the rest of a key is the tenant's
// value followed by ":" and the fact's key.
func NamespacePrefix(dest string) string { return "destination:" + dest + namespaceSep }

// runSep joins a source's name and a tenant's in a verify run's key: a
// unit separator, which no configured source name holds.
const runSep = "\x1ftenant\x1f"

// RunKey is the name a verify run of t's rows of source is kept under in
// syncer_verify_runs and syncer_verify_last, beside the source's own
// (source alone, for the zero Tenant).
func RunKey(source string, t Tenant) string {
	if t == "" {
		return source
	}
	return source + runSep + string(t)
}

// SplitRunKey returns the source and tenant of a key RunKey made; ok is
// false for a source's own.
func SplitRunKey(key string) (source string, t Tenant, ok bool) {
	source, v, ok := strings.Cut(key, runSep)
	return source, Tenant(v), ok
}

// saltSep joins a lane's checkpoint and a tenant in a batch's salt; it
// cannot occur in a checkpoint's name (source names hold letters, digits
// and _ - . $ only).
const saltSep = "/tenant="

// Salt is the salt of t's batches on the lane whose checkpoint is named
// checkpoint: two tenants' equal bodies have two Idempotency-Keys, and a
// recorded batch says whose it is after a crash (OfSalt).
func Salt(checkpoint string, t Tenant) string { return checkpoint + saltSep + string(t) }

// OfSalt returns the tenant of a salt Salt made; ok is false for another.
func OfSalt(salt string) (Tenant, bool) {
	_, v, ok := strings.Cut(salt, saltSep)
	return Tenant(v), ok
}

// CheckpointOfSalt returns the checkpoint of a salt Salt made for t, or
// salt itself when it is not one.
func CheckpointOfSalt(salt string, t Tenant) string {
	return strings.TrimSuffix(salt, saltSep+string(t))
}
