package thirdparty

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// keyDomain separates these hashes from any other SHA-256 of similar bytes
// and lets a future change of the scheme use a new domain instead of
// silently colliding with old keys.
const keyDomain = "syncer idempotency key v1\x00"

// IdempotencyKey derives the Idempotency-Key of a batch from its content:
// salt (empty for the live sync, a replay's id for a replay) and the (id,
// version) pairs in order. The result is "syncer-" followed by the hex of a
// SHA-256, so it is stable across processes and restarts: the same content
// gives the same key and different content a different key.
//
// Payloads are deliberately not hashed: a version identifies its payload, and
// hashing 150 KB per batch would cost more than everything else here.
//
// Deprecated: two installations share these keys, and a body changed under
// the same pairs keeps its key (issue 8). Use BatchKey over the encoded
// body; IdempotencyKey goes once no caller is left.
func IdempotencyKey(salt string, items []Item) string {
	h := sha256.New()
	// The salt is length-prefixed and each pair has a fixed width, so no two
	// different (salt, pairs) inputs can produce the same byte stream.
	var buf [16]byte
	_, _ = h.Write([]byte(keyDomain))
	binary.BigEndian.PutUint64(buf[:8], uint64(len(salt)))
	_, _ = h.Write(buf[:8])
	_, _ = h.Write([]byte(salt))
	for i := range items {
		binary.BigEndian.PutUint64(buf[:8], uint64(items[i].ID))
		binary.BigEndian.PutUint64(buf[8:], uint64(items[i].Version))
		_, _ = h.Write(buf[:])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	const prefix = "syncer-"
	out := make([]byte, len(prefix)+hex.EncodedLen(len(sum)))
	copy(out, prefix)
	hex.Encode(out[len(prefix):], sum[:])
	return string(out)
}
