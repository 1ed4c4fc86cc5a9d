// Package holds owns syncer_held_keys: the keys of a feed that the third
// party answered transiently one by one (an Elasticsearch item's 429 or
// 503, a Standard Webhooks row's 404), each waiting, at the version it was
// answered, for its own time to go again.
//
// What it guarantees: a hold is written in the marker transaction that
// writes its batch's marks and forgets the batch's record (QueueHold,
// QueueRelease), so a batch is settled whole: its accepted items marked,
// its rejected ones failed, its deferred ones held, and nothing of it is
// ever resent as a batch. A hold names one version: a newer version of the
// key is not held and goes at once. Holds survive a restart or a takeover:
// the next holder of the feed's lock loads them (Load). For a source with
// a tenant column a hold is its tenant's key's (ID; migration 028): a
// tenant's transient answer holds that tenant's key only, and the same
// key at another tenant of the lane goes on.
package holds

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
)

// Hold is one held key.
type Hold struct {
	// Feed is the checkpoint name of the key's feed ("live" for
	// resources, "source:<name>" for a configured source).
	Feed string
	// Tenant is the key's tenant in a lane's feed of a source with a
	// tenant column; "" otherwise.
	Tenant  string
	Key     string
	Version int64
	// Reason is the third party's last transient answer to the key,
	// SafeText'd: its status and text.
	Reason string
	// Tries is how many answers in a row deferred the key.
	Tries int
	// Since is the first of those answers; Next when the key goes again.
	Since, Next time.Time
	// HeldAt is Since plus the retry bound: from then on the key holds,
	// and status and the console say so (Holding).
	HeldAt time.Time
}

// ID names a held key within its feed: its tenant ("" outside a lane)
// and key.
type ID struct{ Tenant, Key string }

// ID is h's.
func (h Hold) ID() ID { return ID{h.Tenant, h.Key} }

// Holding reports whether h is past its retry bound at now.
func (h Hold) Holding(now time.Time) bool { return !now.Before(h.HeldAt) }

// Policy is how long a key waits after each transient answer: Initial
// after the first, doubling up to Max, with jitter; past Bound since its
// first it is shown as held (Hold.Holding) and goes every Max.
type Policy struct {
	Initial, Max, Bound time.Duration
}

// wait is how long a key waits after its tries-th transient answer, with
// up to a fifth of jitter taken off (jitter in [0,1)), so keys held together
// spread out and never wait longer than Max.
func (p Policy) wait(tries int, jitter float64) time.Duration {
	w := p.Initial
	for i := 1; i < tries && w < p.Max; i++ {
		w *= 2
	}
	w = min(max(w, time.Millisecond), max(p.Max, p.Initial))
	return w - time.Duration(float64(w)*0.2*jitter)
}

// Deferred is an item a batch's answer left to go again.
type Deferred struct {
	Tenant  string
	Key     string
	Version int64
	Reason  string
}

// Next returns when a key deferred at now for the tries-th time goes
// again (jitter in [0,1)).
func (p Policy) Next(now time.Time, tries int, jitter float64) time.Time {
	return now.Add(p.wait(tries, jitter))
}

// Held returns the holds of items of feed deferred at now under policy p:
// a key already held at the same version (in prior) counts one more try
// and keeps its first time; any other starts again at one try. jitter
// returns numbers in [0,1).
func Held(feed string, items []Deferred, now time.Time, prior map[ID]Hold, p Policy, jitter func() float64) []Hold {
	out := make([]Hold, len(items))
	for i, it := range items {
		h := Hold{Feed: feed, Tenant: it.Tenant, Key: it.Key, Version: it.Version, Reason: it.Reason, Tries: 1, Since: now}
		if p, ok := prior[h.ID()]; ok && p.Version == it.Version {
			h.Tries, h.Since = p.Tries+1, p.Since
		}
		h.Next = p.Next(now, h.Tries, jitter())
		h.HeldAt = h.Since.Add(p.Bound)
		out[i] = h
	}
	return out
}

// QueueHold queues on b the statement that writes hs, holds of feed
// (Held), each replacing its key's last.
func QueueHold(b *pgx.Batch, feed string, hs []Hold) {
	if len(hs) == 0 {
		return
	}
	tenants := make([]string, len(hs))
	keys := make([]string, len(hs))
	versions := make([]int64, len(hs))
	reasons := make([]string, len(hs))
	tries := make([]int32, len(hs))
	since := make([]time.Time, len(hs))
	heldAt := make([]time.Time, len(hs))
	nexts := make([]time.Time, len(hs))
	for i, h := range hs {
		tenants[i], keys[i], versions[i], reasons[i], tries[i] = h.Tenant, h.Key, h.Version, h.Reason, int32(h.Tries)
		since[i], heldAt[i], nexts[i] = h.Since, h.HeldAt, h.Next
	}
	b.Queue(`INSERT INTO syncer_held_keys (feed, key, version, reason, tries, since, held_at, next_at, tenant)
		SELECT $1, k, v, r, t, s, h, n, tn FROM unnest($2::text[], $3::bigint[], $4::text[], $5::int[],
			$6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::text[]) AS u(k, v, r, t, s, h, n, tn)
		ON CONFLICT (feed, tenant, key) DO UPDATE SET version = excluded.version, reason = excluded.reason,
			tries = excluded.tries, since = excluded.since, held_at = excluded.held_at, next_at = excluded.next_at`,
		feed, keys, versions, reasons, tries, since, heldAt, nexts, tenants)
}

// QueueRelease queues on b the statement that ends the holds of ids of
// feed, answered (accepted or rejected) at last: each at its tenant only.
func QueueRelease(b *pgx.Batch, feed string, ids []ID) {
	if len(ids) == 0 {
		return
	}
	tenants, keys := make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		tenants[i], keys[i] = id.Tenant, id.Key
	}
	b.Queue(`DELETE FROM syncer_held_keys h USING unnest($2::text[], $3::text[]) AS u(tenant, key)
		WHERE h.feed = $1 AND h.tenant = u.tenant AND h.key = u.key`, feed, tenants, keys)
}

// Load returns the holds of feed, by tenant and key.
func Load(ctx context.Context, q database.Querier, feed string) (map[ID]Hold, error) {
	rows, err := q.Query(ctx, `SELECT feed, tenant, key, version, reason, tries, since, held_at, next_at FROM syncer_held_keys WHERE feed = $1`, feed)
	if err != nil {
		return nil, fmt.Errorf("holds: load %s: %w", feed, err)
	}
	hs, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("holds: load %s: %w", feed, err)
	}
	out := make(map[ID]Hold, len(hs))
	for _, h := range hs {
		out[h.ID()] = h
	}
	return out, nil
}

// List returns up to limit holds of every feed, the longest held first,
// for status and the console.
func List(ctx context.Context, q database.Querier, limit int) ([]Hold, error) {
	rows, err := q.Query(ctx, `SELECT feed, tenant, key, version, reason, tries, since, held_at, next_at FROM syncer_held_keys
		ORDER BY since, feed, key, tenant LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("holds: list: %w", err)
	}
	hs, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("holds: list: %w", err)
	}
	return hs, nil
}

// Clear makes the held keys of feed go at once (all of them when keys is
// nil; a key at every tenant), as retry-failed asks, and returns how many
// it cleared.
func Clear(ctx context.Context, e database.Querier, feed string, keys []string) (int64, error) {
	var tag pgconn.CommandTag
	var err error
	if keys == nil {
		tag, err = e.Exec(ctx, `DELETE FROM syncer_held_keys WHERE feed = $1`, feed)
	} else {
		tag, err = e.Exec(ctx, `DELETE FROM syncer_held_keys WHERE feed = $1 AND key = ANY($2)`, feed, keys)
	}
	if err != nil {
		return 0, fmt.Errorf("holds: clear %s: %w", feed, err)
	}
	return tag.RowsAffected(), nil
}

func collect(rows pgx.Rows) ([]Hold, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Hold, error) {
		var h Hold
		var tries int32
		err := r.Scan(&h.Feed, &h.Tenant, &h.Key, &h.Version, &h.Reason, &tries, &h.Since, &h.HeldAt, &h.Next)
		h.Tries = int(tries)
		return h, err
	})
}
