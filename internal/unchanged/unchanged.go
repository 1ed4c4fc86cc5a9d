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
// owns syncer_accepted_bodies and syncer_skips (migration 020) and
// the function that writes new digests (migrations 026, 028). The
// digests it keeps are the configured sources'; resources keeps its own
// on its rows and tombstones (accepted_digest, migration 033,
// internal/resources), computed with this package's Digester.
//
// For a source with a tenant column a digest is a (tenant, key)'s
// (migration 028): each tenant is its own account, so a row moved to
// another tenant is never skipped there for a body its old tenant's
// account holds. Outside tenants the tenant is "".
package unchanged

import (
	"context"
	"crypto/sha256"
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
}

// Append appends Digest(tag, it) to dst and returns the extended slice.
func (d *Digester) Append(dst []byte, tag string, it feed.Item) []byte {
	if d.h == nil {
		d.h = sha256.New()
	}
	if d.prefix == nil || d.tag != tag {
		d.tag = tag
		d.prefix = strconv.AppendInt(d.prefix[:0], int64(len(tag)), 10)
		d.prefix = append(append(d.prefix, ':'), tag...)
	}
	d.h.Reset()
	d.h.Write(d.prefix)
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
	return `(SELECT ab.digest FROM syncer_accepted_bodies ab WHERE ab.feed = ` + feed +
		` AND ab.tenant = ` + tenant + ` AND ab.key = (` + key + `)::text COLLATE "default")`
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
		b.Queue(`INSERT INTO syncer_accepted_bodies (feed, tenant, key, digest)
			SELECT $1, $4, n.key, n.digest FROM unnest($2::text[], $3::bytea[]) AS n (key, digest)
			ON CONFLICT (feed, tenant, key) DO UPDATE SET digest = EXCLUDED.digest`, name, keep.Keys, keep.Sums, tenant)
	}
	if fresh.Len() > 0 {
		b.Queue(`SELECT syncer_keep_digests($1, $4, $2::text[], $3::bytea[])`, name, fresh.Keys, fresh.Sums, tenant)
	}
	if len(drop) > 0 {
		b.Queue(`DELETE FROM syncer_accepted_bodies WHERE feed = $1 AND tenant = $3 AND key = ANY ($2::text[])`, name, drop, tenant)
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
		s.Call(`SELECT syncer_keep_digests(` + feed + `::text, ` + ten + `::text, ` + keys + `, ` + sums + `)`)
		return
	}
	s.Modify(`INSERT INTO syncer_accepted_bodies (feed, tenant, key, digest)
		SELECT ` + feed + `::text, ` + ten + `::text, n.key, n.digest FROM unnest(` + keys + `, ` + sums + `) AS n (key, digest)
		ON CONFLICT (feed, tenant, key) DO UPDATE SET digest = EXCLUDED.digest`)
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
	if _, err := q.Exec(ctx, `DELETE FROM syncer_accepted_bodies WHERE feed = $1`, name); err != nil {
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
	if _, err := q.Exec(ctx, `DELETE FROM syncer_accepted_bodies WHERE feed = $1 AND key = ANY ($2::text[])`, name, keys); err != nil {
		return fmt.Errorf("unchanged: forget digests of %s: %w", name, err)
	}
	return nil
}

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
