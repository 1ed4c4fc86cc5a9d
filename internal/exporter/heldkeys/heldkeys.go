// Package heldkeys is the exporter's held-keys stage (issue 42): an item
// its answer deferred (an Elasticsearch item's 429 or 503, a webhook
// row's 404) is neither marked nor failed, and its batch is settled all
// the same: the marker transaction that marks its neighbours and forgets
// its record holds the key (internal/holds), at its version, until a time
// of its own. Passes read past a held key until then, so it goes again
// alone and never takes its neighbours with it. A new version of the key
// is not held.
//
// Keys is what this process knows of the holds of the feeds it exports,
// read from the table at a feed's first pass here (a restart or a
// takeover loses none), and again before each pass while any is held, so
// a hold another daemon wrote or retry-failed cleared is seen within
// ReloadEvery. The table is internal/holds'; this stage only decides
// when to read it and what a marker transaction queues on it, and learns
// what that transaction wrote once it commits (Apply), never before.
//
// "Held" here means a key held back after its own transient answer and
// nothing else: not an export lock a job holds, nor a person's pause of a
// destination.
package heldkeys

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/holds"
)

// ReloadEvery is how often a feed's holds are read again while any is
// held; RecheckEvery, while none is (another daemon may have held a key
// of the feed while it held the lock).
const (
	ReloadEvery  = time.Second
	RecheckEvery = 30 * time.Second
)

// warnMax is how many held keys one marker transaction names at warn;
// the rest are counted in its last line.
const warnMax = 10

// Keys are the holds of the feeds exported here, by checkpoint name.
type Keys struct {
	q      database.Querier
	now    func() time.Time
	logger *slog.Logger

	mu    sync.Mutex
	feeds map[string]*feedHolds
}

type feedHolds struct {
	loaded time.Time
	keys   map[holds.ID]holds.Hold
}

// New returns the Keys of a process that reads the holds with q, with
// the clock now (tests stub it) and logs on logger.
func New(q database.Querier, now func() time.Time, logger *slog.Logger) *Keys {
	return &Keys{q: q, now: now, logger: logger, feeds: map[string]*feedHolds{}}
}

// PolicyOf is d's hold policy (delivery.Deliverer.HoldPolicy), or the
// delivery defaults for a destination that has none.
func PolicyOf(d any) holds.Policy {
	if hp, ok := d.(interface{ HoldPolicy() holds.Policy }); ok {
		return hp.HoldPolicy()
	}
	return holds.Policy{Initial: delivery.BackoffInitialDefault, Max: delivery.BackoffMaxDefault, Bound: delivery.MaxElapsedDefault}
}

// Holding returns the holds of feed name whose time has not come yet, for
// a pass to read past, reading the holds again when they may have
// changed. A replay holds nothing: its pass reads each row once, so
// nothing comes back.
func (k *Keys) Holding(ctx context.Context, name string) ([]holds.Hold, error) {
	if checkpoint.OwnerOf(name).Kind == checkpoint.KindReplay {
		return nil, nil
	}
	now := k.now()
	k.mu.Lock()
	f := k.feeds[name]
	stale := f == nil || now.Sub(f.loaded) >= RecheckEvery || (len(f.keys) > 0 && now.Sub(f.loaded) >= ReloadEvery)
	k.mu.Unlock()
	if stale {
		keys, err := holds.Load(ctx, k.q, name)
		if err != nil {
			return nil, err
		}
		f = &feedHolds{loaded: now, keys: keys}
		k.mu.Lock()
		k.feeds[name] = f
		k.mu.Unlock()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []holds.Hold
	for _, h := range f.keys {
		if h.Next.After(now) {
			out = append(out, h)
		}
	}
	return out, nil
}

// Of returns the holds of feed name this process knows, by tenant and
// key; nil when it knows none. The map is never edited once returned
// (Apply copies it).
func (k *Keys) Of(name string) map[holds.ID]holds.Hold {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f := k.feeds[name]; f != nil && len(f.keys) > 0 {
		return f.keys
	}
	return nil
}

// Feed names a feed's holds: its checkpoint, and the source and
// destination its log lines name.
type Feed struct {
	Checkpoint, Source, Destination string
}

// Change is what one marker transaction does to a feed's holds, for
// Apply once it commits.
type Change struct {
	feed     Feed
	held     []holds.Hold
	released []holds.ID
}

// Queue queues on b the holds of f's deferred items and the end of the
// holds of answered keys (accepted or rejected at last), each at its
// tenant (a lane's holds are per tenant and key, so a tenant's answer
// holds or releases its key only), and returns the change to Apply once
// the transaction commits. A replay's deferred rows are not held (its
// caller hands them to the live export instead): pass none.
func (k *Keys) Queue(b *pgx.Batch, f Feed, deferred []holds.Deferred, acc, rej []feed.Item, p holds.Policy) Change {
	ch := Change{feed: f}
	prior := k.Of(f.Checkpoint)
	if len(prior) > 0 {
		// The answered keys only when a key is held: a drain holds none,
		// and listing its every key was 2% of what it allocated.
		for _, id := range answered(acc, rej) {
			if _, ok := prior[id]; ok {
				ch.released = append(ch.released, id)
			}
		}
		holds.QueueRelease(b, f.Checkpoint, ch.released)
	}
	if len(deferred) == 0 {
		return ch
	}
	ch.held = holds.Held(f.Checkpoint, deferred, k.now(), prior, p, rand.Float64)
	holds.QueueHold(b, f.Checkpoint, ch.held)
	return ch
}

// answered are the keys of items answered for good, at their tenants,
// whose holds end.
func answered(acc, rej []feed.Item) []holds.ID {
	keys := make([]holds.ID, 0, len(acc)+len(rej))
	for _, it := range acc {
		keys = append(keys, holds.ID{Tenant: it.Tenant(), Key: it.ID})
	}
	for _, it := range rej {
		keys = append(keys, holds.ID{Tenant: it.Tenant(), Key: it.ID})
	}
	return keys
}

// Apply makes what this process knows of the holds match what a
// committed marker transaction wrote, and says so in the log.
func (k *Keys) Apply(ctx context.Context, changes []Change) {
	now := k.now()
	warned := 0
	for _, ch := range changes {
		if len(ch.held) == 0 && len(ch.released) == 0 {
			continue
		}
		k.mu.Lock()
		f := k.feeds[ch.feed.Checkpoint]
		if f == nil {
			f = &feedHolds{keys: map[holds.ID]holds.Hold{}}
			k.feeds[ch.feed.Checkpoint] = f
		} else {
			// Copy on write: a pass may be reading the last map.
			keys := make(map[holds.ID]holds.Hold, len(f.keys)+len(ch.held))
			for id, h := range f.keys {
				keys[id] = h
			}
			f.keys = keys
		}
		for _, id := range ch.released {
			delete(f.keys, id)
		}
		for _, h := range ch.held {
			f.keys[h.ID()] = h
		}
		k.mu.Unlock()

		for _, h := range ch.held {
			past := h.Holding(now)
			level := slog.LevelDebug
			if (h.Tries == 1 || past) && warned < warnMax {
				level = slog.LevelWarn
				warned++
			}
			msg := "exporter: item answered transiently on its own; its key is held and goes again alone, its neighbours are settled"
			if past {
				msg = "exporter: key held: answered transiently past the retry bound; it goes again every backoff, the rest of the source flows"
			}
			k.logger.Log(ctx, level, msg, slog.String("source", ch.feed.Source), slog.String("destination", ch.feed.Destination),
				slog.String("key", h.Key), slog.Int64("version", h.Version), slog.String("reason", h.Reason),
				slog.Int("tries", h.Tries), slog.Time("since", h.Since), slog.Duration("next_in", h.Next.Sub(now).Round(time.Millisecond)))
		}
		if n := len(ch.held) - warnMax; n > 0 && warned >= warnMax {
			k.logger.WarnContext(ctx, "exporter: more keys held in the same transaction (see syncer status)",
				slog.String("source", ch.feed.Source), slog.String("destination", ch.feed.Destination), slog.Int("more", n))
		}
	}
}
