package exporter

// What the process knows of the export locks its jobs hold: how many of
// its jobs hold each source's (syncer_source_lock_held), and the key of
// the last batch pushed under each lock, for its run's summary line.
// Neither decides anything: the lock itself (internal/locks) does.

import (
	"sync"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// lockCounts counts the export locks the process's jobs hold, by source:
// more than one for a moment when a job whose lock was lost has not
// released it yet and another took it anew.
type lockCounts struct {
	metrics *metrics.Metrics

	mu     sync.Mutex
	counts map[string]*lockCount
}

// lockCount is how many of the process's jobs hold a source's export
// lock, and the destination label its series was set with.
type lockCount struct {
	n    int
	dest string
}

// count counts a job's taking (+1) or giving up (-1) of source name's
// export lock, and sets syncer_source_lock_held from the count, not from
// the last job's word: a job whose lock was lost (its session ended)
// releases it after another job of the process took the lock anew, and
// must not say the process holds none (seed 20261125's soak). dest labels
// the series; a release keeps the label its taking set. A delta of 0
// makes the series (at its count) for a source exported here, so an
// alert finds a 0 before its first job.
func (c *lockCounts) count(name, dest string, delta int) {
	if src, _, lane := jobs.LaneOf(name); lane {
		// A lane's lock counts as its source's: the series stay one a
		// source, held while any of its lanes is held here.
		name = src
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]*lockCount{}
	}
	h := c.counts[name]
	if h == nil {
		h = &lockCount{dest: dest}
		c.counts[name] = h
	}
	if delta >= 0 && h.n == 0 && dest != h.dest {
		// The source moved to another destination since: the old
		// label's series says 0 from now on.
		c.metrics.SetLockHeld(name, h.dest, false)
		h.dest = dest
	}
	h.n += delta
	c.metrics.SetLockHeld(name, h.dest, h.n > 0)
}

// lastKeys is the key of the last batch pushed under each export lock
// held here, one per run (a lane's or a source's job), for the run's
// summary line: a third party's support ticket names a key, and a lane's
// line must name its own tenant's, not the last key any lane pushed. A
// run takes its entry out when it ends (take).
type lastKeys struct {
	m sync.Map // *locks.Lock -> string
}

// pushed records key as the last batch pushed under lk.
func (k *lastKeys) pushed(lk *locks.Lock, key string) {
	if lk != nil {
		k.m.Store(lk, key)
	}
}

// take returns the key of the last batch pushed under lk, "" when none,
// and forgets it: the run that held lk ends.
func (k *lastKeys) take(lk *locks.Lock) string {
	if v, ok := k.m.LoadAndDelete(lk); ok {
		return v.(string)
	}
	return ""
}
