package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/holds"
)

// Held keys (issue 42): an item its answer deferred (an Elasticsearch
// item's 429 or 503, a webhook row's 404) is neither marked nor failed,
// and its batch is settled all the same: the marker transaction that
// marks its neighbours and forgets its record holds the key
// (internal/holds), at its version, until a time of its own. Passes read
// past a held key until then, so it goes again alone, and never takes its
// neighbours with it. A new version of the key is not held.
//
// The holds of a feed are kept here too, read from the table at the
// feed's first pass in this process (a restart or a takeover loses
// none), and again before each pass while any is held, so a hold another
// daemon wrote or retry-failed cleared is seen within holdsReloadEvery.

// holdsReloadEvery is how often a feed's holds are read again while any is
// held; holdsRecheckEvery, while none is (another daemon may have held a
// key of the feed while it held the lock).
const (
	holdsReloadEvery  = time.Second
	holdsRecheckEvery = 30 * time.Second
)

// holdWarnMax is how many held keys one marker transaction names at warn;
// the rest are counted in its last line.
const holdWarnMax = 10

// heldKeys are the holds of the feeds exported here, by checkpoint name.
type heldKeys struct {
	mu    sync.Mutex
	feeds map[string]*feedHolds
}

type feedHolds struct {
	loaded time.Time
	keys   map[holds.ID]holds.Hold
}

// holdPolicy is the destination's (delivery.Deliverer.HoldPolicy), or
// the delivery defaults.
func holdPolicy(d Destination) holds.Policy {
	if hp, ok := d.(interface{ HoldPolicy() holds.Policy }); ok {
		return hp.HoldPolicy()
	}
	return holds.Policy{Initial: delivery.BackoffInitialDefault, Max: delivery.BackoffMaxDefault, Bound: delivery.MaxElapsedDefault}
}

// skipHeld adds to skip the keys of feed name held past now, reading the
// holds again when they may have changed.
func (e *Exporter) skipHeld(ctx context.Context, name string, skip sentItems) (sentItems, error) {
	if checkpoint.OwnerOf(name).Kind == checkpoint.KindReplay {
		return skip, nil // a replay's pass reads each row once: nothing comes back
	}
	now := e.now()
	e.held.mu.Lock()
	f := e.held.feeds[name]
	stale := f == nil || now.Sub(f.loaded) >= holdsRecheckEvery || (len(f.keys) > 0 && now.Sub(f.loaded) >= holdsReloadEvery)
	e.held.mu.Unlock()
	if stale {
		keys, err := holds.Load(ctx, e.pool, name)
		if err != nil {
			return skip, err
		}
		e.held.mu.Lock()
		if e.held.feeds == nil {
			e.held.feeds = map[string]*feedHolds{}
		}
		f = &feedHolds{loaded: now, keys: keys}
		e.held.feeds[name] = f
		e.held.mu.Unlock()
	}
	e.held.mu.Lock()
	defer e.held.mu.Unlock()
	for _, h := range f.keys {
		if h.Next.After(now) {
			skip = skip.add(h.Key, h.Version)
		}
	}
	return skip, nil
}

// heldOf returns the holds of feed name this process knows, by tenant
// and key; nil
// when it knows none.
func (e *Exporter) heldOf(name string) map[holds.ID]holds.Hold {
	e.held.mu.Lock()
	defer e.held.mu.Unlock()
	if f := e.held.feeds[name]; f != nil && len(f.keys) > 0 {
		return f.keys
	}
	return nil
}

// heldChange is what one marker transaction does to a feed's holds.
type heldChange struct {
	name     string
	held     []holds.Hold
	released []holds.ID
}

// queueHolds queues on b the holds of deferred items of feed name and the
// end of the holds of answered keys (accepted or rejected at last), each
// at its tenant (tenants[i] is deferred[i]'s: a lane's holds are per
// tenant and key, so a tenant's answer holds or releases its key only), and
// returns the change to make to what this process knows once the
// transaction commits. A replay holds nothing: its pass reads each row
// once, so its deferred rows are handed to the live export instead
// (pending again there, held there if they are deferred again), and the
// replay still delivers every row of its range.
func (p *pipeline) queueHolds(b *pgx.Batch, name string, deferred []delivery.Deferral, tenants []string, acc, rej []feed.Item) (heldChange, error) {
	ch := heldChange{name: name}
	prior := p.e.heldOf(name)
	if len(prior) > 0 {
		// The answered keys only when a key is held: a drain holds none,
		// and listing its every key was 2% of what it allocated.
		for _, id := range answeredKeys(acc, rej) {
			if _, ok := prior[id]; ok {
				ch.released = append(ch.released, id)
			}
		}
		holds.QueueRelease(b, name, ch.released)
	}
	if len(deferred) == 0 {
		return ch, nil
	}
	if checkpoint.OwnerOf(name).Kind == checkpoint.KindReplay {
		l, ok := p.feed.(liveHandover)
		if !ok {
			return ch, fmt.Errorf("exporter: replay %s: its feed cannot hand deferred rows to the live export", name)
		}
		return ch, l.QueueLive(b, deferred)
	}
	now := p.e.now()
	items := make([]holds.Deferred, len(deferred))
	for i, df := range deferred {
		items[i] = holds.Deferred{Tenant: tenants[i], Key: df.Item.ID, Version: df.Item.Version, Reason: df.Reason}
	}
	ch.held = holds.Held(name, items, now, prior, holdPolicy(p.dest), rand.Float64)
	holds.QueueHold(b, name, ch.held)
	return ch, nil
}

// liveHandover is a replay's feed: rows its answer deferred are made
// pending in the live export.
type liveHandover interface {
	QueueLive(b *pgx.Batch, deferred []delivery.Deferral) error
}

// applyHolds makes what this process knows of the holds match what a
// committed marker transaction wrote, and says so in the log.
func (p *pipeline) applyHolds(ctx context.Context, changes []heldChange) {
	e := p.e
	now := e.now()
	warned := 0
	for _, ch := range changes {
		if len(ch.held) == 0 && len(ch.released) == 0 {
			continue
		}
		e.held.mu.Lock()
		if e.held.feeds == nil {
			e.held.feeds = map[string]*feedHolds{}
		}
		f := e.held.feeds[ch.name]
		if f == nil {
			f = &feedHolds{keys: map[holds.ID]holds.Hold{}}
			e.held.feeds[ch.name] = f
		} else {
			// Copy on write: a pass may be reading the last map.
			keys := make(map[holds.ID]holds.Hold, len(f.keys)+len(ch.held))
			for k, h := range f.keys {
				keys[k] = h
			}
			f.keys = keys
		}
		for _, id := range ch.released {
			delete(f.keys, id)
		}
		for _, h := range ch.held {
			f.keys[h.ID()] = h
		}
		e.held.mu.Unlock()

		source := sourceOf(ch.name)
		for _, h := range ch.held {
			past := h.Holding(now)
			level := slog.LevelDebug
			if (h.Tries == 1 || past) && warned < holdWarnMax {
				level = slog.LevelWarn
				warned++
			}
			msg := "exporter: item answered transiently on its own; its key is held and goes again alone, its neighbours are settled"
			if past {
				msg = "exporter: key held: answered transiently past the retry bound; it goes again every backoff, the rest of the source flows"
			}
			e.logger.Log(ctx, level, msg, slog.String("source", source), slog.String("destination", p.destName),
				slog.String("key", h.Key), slog.Int64("version", h.Version), slog.String("reason", h.Reason),
				slog.Int("tries", h.Tries), slog.Time("since", h.Since), slog.Duration("next_in", h.Next.Sub(now).Round(time.Millisecond)))
		}
		if n := len(ch.held) - holdWarnMax; n > 0 && warned >= holdWarnMax {
			e.logger.WarnContext(ctx, "exporter: more keys held in the same transaction (see syncer status)",
				slog.String("source", source), slog.String("destination", p.destName), slog.Int("more", n))
		}
	}
}
