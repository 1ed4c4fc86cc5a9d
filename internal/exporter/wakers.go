package exporter

// How the relay reaches a job lingering here (linger.go): a waker a
// feed, activated while a job of the feed runs, which takes a
// notification instead of a new River job.

import (
	"sync"

	"github.com/syncer-dev/syncer/internal/outbox"
)

// waker hands one feed's job the relay's notifications.
type waker struct {
	mu     sync.Mutex
	active int // jobs of the feed lingering here (a stale one may overlap)
	ch     chan struct{}
}

// wakers are the relay's way to the jobs lingering here, by feed (""
// for resources, else a source's or a lane's name).
type wakers struct {
	mu sync.Mutex
	m  map[string]*waker
}

// of returns the waker of source name.
func (ws *wakers) of(name string) *waker {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = map[string]*waker{}
	}
	w, ok := ws.m[name]
	if !ok {
		w = &waker{ch: make(chan struct{}, 1)}
		ws.m[name] = w
	}
	return w
}

// forget drops name's waker: an abandoned job's wake-ups go to the
// source's next job, not to it.
func (ws *wakers) forget(name string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.m, name)
}

func (w *waker) activate() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.active++
}

// deactivate stops taking wake-ups and, for the feed's last active job,
// reports whether one was taken that the job has not handled yet. While
// another job of the feed is active here the wake-up is left to it.
func (w *waker) deactivate() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active > 0 {
		w.active--
	}
	if w.active > 0 {
		return false
	}
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

// awake is a feed's waker activated by a job as it starts, before it takes
// its lock: a notification meanwhile goes to it (it looks at its table
// once it has the lock) rather than into yet another job.
type awake struct {
	w *waker
	// taken: linger owns the activation.
	taken bool
}

// awaken activates feed name's waker for a starting job.
func (ws *wakers) awaken(name string) *awake {
	w := ws.of(name)
	w.activate()
	return &awake{w: w}
}

// end deactivates the waker unless linger took it over, and reports
// whether a job of the feed is still active here.
func (a *awake) end() (othersActive bool) {
	if a.taken {
		return a.w.isActive()
	}
	a.taken = true
	a.w.deactivate()
	return a.w.isActive()
}

// wake passes a notification to the feed's job, if one lingers here.
func (w *waker) wake() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active == 0 {
		return false
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
	return true
}

func (w *waker) isActive() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active > 0
}

// Wake implements outbox.Waker: a job of source src lingering here takes
// the notification.
func (e *Exporter) Wake(src string) bool { return e.wakers.of(src).wake() }

// Active implements outbox.Waker.
func (e *Exporter) Active(src string) bool { return e.wakers.of(src).isActive() }

var _ outbox.Waker = (*Exporter)(nil)
