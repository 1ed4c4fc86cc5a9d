package locks

import (
	"crypto/sha256"
	"encoding/binary"
)

// Key derives a stable advisory lock key from a namespace and a name: the
// first 8 bytes of SHA-256(namespace + "\x00" + name) as a big-endian int64.
// The package documentation shows how to compute it in SQL and Ruby.
func Key(namespace, name string) int64 {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)[:8]))
}

// Namespace is the namespace of syncer's own lock keys.
const Namespace = "syncer"

// MigrateKey serialises concurrent migrators across processes. It is a
// fixed value, the bytes of "syncermg" read as a big-endian int64, not a
// Key: it predates Key, and a migrator of an older release must keep
// excluding one of this release.
const MigrateKey int64 = 0x73796e6365726d67

// ExportKey is the key of the export lock of source name of the
// installation in schema: one per source, so sources export in parallel
// and daemons share them out. Advisory locks are per database, so the
// schema is part of the name: two installations in one database must not
// share a lock. Resources (jobs.Resources) keep the key the releases
// before sources had, Key("syncer", "export:"+schema), and a configured
// source the one its own lock had, so a daemon of the previous release
// and one of this release exclude each other during a rolling upgrade.
func ExportKey(schema, name string) int64 {
	if name == resources {
		return Key(Namespace, "export:"+schema)
	}
	return Key(Namespace, "export:"+schema+":source:"+name)
}

// resources is jobs.Resources: locks imports no package of syncer's.
const resources = "resources"

// DestinationKey is the key of the lock a daemon holds while it pushes to
// configured destination name of the installation in schema: one pusher at
// a time per destination, across daemons, so the destination's rate limit
// and requests in flight hold however many daemons share its sources.
func DestinationKey(schema, name string) int64 {
	return Key(Namespace, "push:"+schema+":destination:"+name)
}

// RelayKey is the key of the transaction-level lock that serialises the
// outbox relays of the installation in schema.
func RelayKey(schema string) int64 { return Key(Namespace, "relay:"+schema) }

// pgLocksIDs splits key as pg_locks shows a bigint advisory lock.
func pgLocksIDs(key int64) (classid, objid uint32) {
	return uint32(uint64(key) >> 32), uint32(uint64(key))
}
