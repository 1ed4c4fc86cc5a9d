// Package unchanged keeps, per feed and key, a digest of the body the
// third party last accepted, so that a version whose body it already has
// is settled as skipped without a request (issue 45), and counts the
// skips.
//
// Guarantees: a digest is written only in the transaction that marks its
// version accepted, and only for a body this process rendered and sent
// itself; a key whose outcome leaves the third party's copy in doubt (a
// batch resent from its record, an item deferred after a transient answer
// of its own) loses its digest in that transaction, so it is sent again
// rather than skipped. A digest covers the destination's tag (its URL,
// format and settings: docs/protocol.md), so a changed destination finds
// no equal digest and sends. A tombstone has a digest of its own: a delete
// the third party has is not sent again. Forget drops a feed's digests,
// for a replay, which re-exports whatever the third party has; ForgetKeys
// a heal's keys, which the third party was found not to hold. The package
// owns syncer_source_digests (migration 034), the function that writes
// new digests there, and syncer_skips (migration 020); it keeps the
// configured sources' digests. Resources keeps its own on its rows and
// tombstones (accepted_digest, migration 033, internal/resources),
// computed with this package's Digester. syncer_accepted_bodies (020,
// 028) is the previous releases' table, emptied of sources' digests by
// 034.
//
// A digest is found by its slot, a 64-bit hash of the feed and the key
// (SlotSQL), and is a (tenant, key)'s: each tenant is its own account, so
// a row moved to another tenant is never skipped there for a body its old
// tenant's account holds. Outside tenants the tenant is "". A slot holds
// one (feed, tenant, key): a key whose hash collides with another's, or
// whose row moved tenants, finds the other's digest and compares its
// identity, not its body, so it is sent rather than skipped; whichever
// was accepted last keeps the slot.
package unchanged

import (
	"context"
	"crypto/sha256"
	"encoding"
	"fmt"
	"hash"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/feed"
)

// Digest is the digest of it's body as a destination tagged tag renders
// it: the tag, and the payload or the tombstone. Its id is the row's
// (the key the digest is kept under), its version is not in it.
func Digest(tag string, it feed.Item) []byte {
	var d Digester
	return d.Append(nil, tag, it)
}

// digestLen is how much of the SHA-256 a digest keeps.
const digestLen = 16

// DigestLen is the length of a digest, in bytes.
const DigestLen = digestLen

// Digester computes digests with one hash, reset for each: a marker
// transaction digests every body of its batches, and a hash and a sum
// apiece were a tenth of what a drain allocated.
type Digester struct {
	h      hash.Hash
	one    [1]byte
	tag    string
	prefix []byte // "<len(tag)>:<tag>", for tag
	// state is h's state once prefix is written, when prefix fills a
	// block or more (a destination's tag is 64 hex digits: 67 bytes), so
	// that each digest restores it rather than hashing that block again:
	// one SHA-256 block of the six of a drain's row (issue 55). The
	// digest is the same either way. nil: prefix is hashed each time.
	state []byte
}

// Append appends Digest(tag, it) to dst and returns the extended slice.
func (d *Digester) Append(dst []byte, tag string, it feed.Item) []byte {
	if d.h == nil {
		d.h = sha256.New()
	}
	if d.prefix == nil || d.tag != tag {
		d.setTag(tag)
	}
	if d.state == nil || d.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(d.state) != nil {
		d.h.Reset()
		d.h.Write(d.prefix)
	}
	if it.Deleted {
		d.one[0] = 'D'
		d.h.Write(d.one[:])
	} else {
		d.one[0] = 'P'
		d.h.Write(d.one[:])
		d.h.Write(it.Payload)
	}
	return d.h.Sum(dst)[:len(dst)+digestLen]
}

// setTag makes tag the one d digests under: its prefix, and h's state
// after it when restoring that state saves hashing a block.
func (d *Digester) setTag(tag string) {
	d.tag = tag
	d.prefix = strconv.AppendInt(d.prefix[:0], int64(len(tag)), 10)
	d.prefix = append(append(d.prefix, ':'), tag...)
	d.state = nil
	if len(d.prefix) < d.h.BlockSize() {
		return
	}
	d.h.Reset()
	d.h.Write(d.prefix)
	if m, ok := d.h.(encoding.BinaryMarshaler); ok {
		if st, err := m.MarshalBinary(); err == nil {
			d.state = st
		}
	}
}

// Digests are keys and the digests of their bodies, as the statements of
// QueueSettledDigests take them: two arrays, the digests in one backing
// array. A batch holds a key once (its read returns each key once), so
// no key is added twice.
type Digests struct {
	Keys []string
	Sums [][]byte
	buf  []byte
	d    Digester
}

// NewDigests returns Digests with room for n keys.
func NewDigests(n int) *Digests {
	return &Digests{Keys: make([]string, 0, n), Sums: make([][]byte, 0, n), buf: make([]byte, 0, n*sha256.Size)}
}

// Reset empties ds for n keys, keeping its arrays when they have room: a
// marker reuses a transaction's Digests in the next, once the
// transaction's arguments were encoded (issue 55).
func (ds *Digests) Reset(n int) {
	if cap(ds.Keys) < n {
		ds.Keys, ds.Sums, ds.buf = make([]string, 0, n), make([][]byte, 0, n), make([]byte, 0, n*sha256.Size)
		return
	}
	clear(ds.Keys[:cap(ds.Keys)]) // the keys of the last batch are not kept alive
	ds.Keys, ds.Sums, ds.buf = ds.Keys[:0], ds.Sums[:0], ds.buf[:0]
}

// Add adds the digest of it's body, as tag renders it, under it.ID.
func (ds *Digests) Add(tag string, it feed.Item) {
	at := len(ds.buf)
	ds.buf = ds.d.Append(ds.buf, tag, it)
	ds.Keys = append(ds.Keys, it.ID)
	ds.Sums = append(ds.Sums, ds.buf[at:len(ds.buf):len(ds.buf)])
}

// Flat is the digests one after the other, DigestLen bytes each: what a
// statement splits, rather than an array of one bytea each (issue 55).
func (ds *Digests) Flat() []byte { return ds.flat() }

// flat is the digests one after the other: Add's buffer, or a copy for
// Digests built otherwise.
func (ds *Digests) flat() []byte {
	if len(ds.buf) == len(ds.Keys)*digestLen {
		return ds.buf
	}
	out := make([]byte, 0, len(ds.Keys)*digestLen)
	for _, d := range ds.Sums {
		out = append(out, d[:digestLen]...)
	}
	return out
}

// Len is the number of keys.
func (ds *Digests) Len() int {
	if ds == nil {
		return 0
	}
	return len(ds.Keys)
}

// KeptSQL is an expression of a feed's pending read that is the digest
// kept for one of its keys (NULL when none is): feed and key are SQL
// expressions of the read, the feed's name and the key's text form. The
// read returns it with each item (feed.Item.Kept), so that comparing a
// page's bodies with those last accepted costs no statement of its own:
// a scalar subquery, an index probe a key that the planner cannot turn
// into a scan of the table, and the key compared under the index's
// collation (a source's change log keys are COLLATE "C", which would keep
// the index out). A join of the page with the table plans as the same
// probes and saved 1-2% of a read (issue 55: docs/benchmarks.md). tenant is the tenant's SQL expression: the empty
// string outside tenants.
func KeptSQL(feed, tenant, key string) string {
	return `(SELECT d.digest FROM syncer_source_digests d WHERE d.slot = ` + SlotSQL(feed, key) +
		` AND d.feed = (` + feed + `)::text COLLATE "C" AND d.tenant = (` + tenant + `)::text COLLATE "C" AND d.key = (` + key + `)::text COLLATE "C")`
}

// SlotSQL is the SQL of the slot of feed's key (SQL expressions of their
// text): the bigint the digests are found by (migration 034, whose
// syncer_keep_source_digests computes the same). One comparison of two
// bigints a step of the index's descent, where the three texts of
// syncer_accepted_bodies' key were compared under the database's
// collation (issue 57: docs/benchmarks.md). PostgreSQL keeps hashtext
// and hashtextextended stable, as hash partitions need them to be; were
// they to change, the digests would be found in no slot and sent.
func SlotSQL(feed, key string) string {
	return `pg_catalog.hashtextextended((` + key + `)::text COLLATE "C", pg_catalog.hashtext((` + feed + `)::text COLLATE "C"))`
}

// upsertSQL upserts the digests of relation n (key, digest) for the feed
// and tenant SQL expressions: one row a slot, the last accepted key's.
func upsertSQL(feed, tenant, n string) string {
	return `INSERT INTO syncer_source_digests AS d (slot, feed, tenant, key, digest)
		SELECT DISTINCT ON (1) ` + SlotSQL(feed, "n.key") + `, ` + feed + `, ` + tenant + `, n.key, n.digest FROM ` + n + `
		ON CONFLICT (slot) DO UPDATE SET feed = EXCLUDED.feed, tenant = EXCLUDED.tenant, key = EXCLUDED.key, digest = EXCLUDED.digest`
}

// QueueSettled queues on b, for feed name and tenant ("" outside
// tenants), the digests of bodies accepted
// (keep and fresh, by id) and the removal of the digests of keys whose
// third-party copy is in doubt (drop). fresh are the digests of keys that
// had none when their version was read (feed.Item.Kept nil in a read that
// returns them): they are inserted, which costs PostgreSQL about half an
// upsert, and upserted only when one of them got a digest since
// (syncer_keep_digests, migration 026). keep are upserted.
func QueueSettled(b *pgx.Batch, name, tenant string, keep, fresh map[string][]byte, drop []string) {
	QueueSettledDigests(b, name, tenant, fromMap(keep), fromMap(fresh), drop)
}

// QueueSettledDigests is QueueSettled with the digests as Digests (nil
// for none).
func QueueSettledDigests(b *pgx.Batch, name, tenant string, keep, fresh *Digests, drop []string) {
	if keep.Len() > 0 {
		b.Queue(upsertSQL("$1::text", "$4::text", "unnest($2::text[], $3::bytea[]) AS n (key, digest)"), name, keep.Keys, keep.Sums, tenant)
	}
	if fresh.Len() > 0 {
		b.Queue(`SELECT syncer_keep_source_digests($1, $4, $2::text[], $3::bytea[])`, name, fresh.Keys, fresh.Sums, tenant)
	}
	if len(drop) > 0 {
		b.Queue(forgetKeysSQL+` AND d.tenant = $3::text COLLATE "C"`, name, drop, tenant)
	}
}

// ComposeSettled adds to s, for feed name and tenant ("" outside
// tenants), the digests ds of bodies accepted under keys, an expression
// of s (text[], in ds's order) other pieces of s share (issue 55: the
// marks' keys, sent once): fresh ones as QueueSettledDigests writes its
// fresh, others upserted as its keep. The digests go as one bytea, split
// by the statement, not as an array of one each. The guarantees are
// QueueSettledDigests': compose it into a statement of the transaction
// that marks the versions accepted.
func ComposeSettled(s *compose.Statement, name, tenant, keys string, ds *Digests, fresh bool) {
	if ds.Len() == 0 {
		return
	}
	flat := s.Arg(ds.flat())
	sums := `ARRAY(SELECT substring(` + flat + `::bytea FROM i * ` + strconv.Itoa(digestLen) + ` + 1 FOR ` + strconv.Itoa(digestLen) +
		`) FROM generate_series(0, length(` + flat + `::bytea) / ` + strconv.Itoa(digestLen) + ` - 1) AS i ORDER BY i)`
	feed, ten := s.Arg(name), s.Arg(tenant)
	if fresh {
		s.Call(`SELECT syncer_keep_source_digests(` + feed + `::text, ` + ten + `::text, ` + keys + `, ` + sums + `)`)
		return
	}
	s.Modify(upsertSQL(feed+"::text", ten+"::text", `unnest(`+keys+`, `+sums+`) AS n (key, digest)`))
}

// fromMap are digests by id as Digests.
func fromMap(digests map[string][]byte) *Digests {
	if len(digests) == 0 {
		return nil
	}
	ds := &Digests{Keys: make([]string, 0, len(digests)), Sums: make([][]byte, 0, len(digests))}
	for id, d := range digests {
		ds.Keys, ds.Sums = append(ds.Keys, id), append(ds.Sums, d)
	}
	return ds
}

// QueueSkipped queues on b the count of n versions of feed name settled
// as skipped.
func QueueSkipped(b *pgx.Batch, name string, n int) {
	if n == 0 {
		return
	}
	b.Queue(`INSERT INTO syncer_skips AS s (feed, skipped, last_at) VALUES ($1, $2, now())
		ON CONFLICT (feed) DO UPDATE SET skipped = s.skipped + EXCLUDED.skipped, last_at = EXCLUDED.last_at`, name, n)
}

// Forget drops every digest of feed name: its next versions are sent
// whatever the third party has (a replay).
func Forget(ctx context.Context, q database.Querier, name string) error {
	// A scan of the table: a replay's or a reinstall's, not a drain's.
	if _, err := q.Exec(ctx, `DELETE FROM syncer_source_digests WHERE feed = $1::text COLLATE "C"`, name); err != nil {
		return fmt.Errorf("unchanged: forget the digests of %s: %w", name, err)
	}
	return nil
}

// ForgetKeys drops the digests of keys of feed name: the third party was
// found not to hold what they say (syncer verify --heal), so their next
// versions are sent, not skipped.
func ForgetKeys(ctx context.Context, q database.Querier, name string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, forgetKeysSQL, name, keys); err != nil {
		return fmt.Errorf("unchanged: forget digests of %s: %w", name, err)
	}
	return nil
}

// forgetKeysSQL deletes the digests of feed $1's keys $2 (text[]), of
// any tenant, each found by its slot.
var forgetKeysSQL = `DELETE FROM syncer_source_digests d USING unnest($2::text[]) AS k (key)
	WHERE d.slot = ` + SlotSQL("$1::text", "k.key") + ` AND d.feed = $1::text COLLATE "C" AND d.key = k.key COLLATE "C"`

// Skips is how many versions of a feed were settled as skipped.
type Skips struct {
	Skipped int64
	LastAt  time.Time
}

// Count returns the skips of every feed that had any, by feed.
func Count(ctx context.Context, q database.Querier) (map[string]Skips, error) {
	rows, err := q.Query(ctx, `SELECT feed, skipped, last_at FROM syncer_skips`)
	if err != nil {
		return nil, fmt.Errorf("unchanged: read skips: %w", err)
	}
	out := map[string]Skips{}
	var name string
	var s Skips
	_, err = pgx.ForEachRow(rows, []any{&name, &s.Skipped, &s.LastAt}, func() error {
		out[name] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unchanged: read skips: %w", err)
	}
	return out, nil
}
