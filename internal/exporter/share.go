package exporter

// The share: a tenant source's lanes are spread over the daemons that
// export it (Config.Peers). A daemon runs at most its
// share of them (the lanes / daemons, rounded up) as it takes them, and a
// daemon that runs more than its share because another started since
// gives lanes up, one at a time, rather than keep them until their run
// limit (docs/design.md, "Lanes over daemons").

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/syncer-dev/syncer/internal/jobs"
)

const (
	// LaneShareSnooze is the least a lane's job waits when the daemon
	// that fetched it holds its share of the source's lanes already:
	// another daemon's River fetches it meanwhile. Up to laneShareJitter
	// more is added at random, job by job (shareSnooze). The wait is
	// short and random because the Rivers race for the job: a snooze of a
	// second ended about when the River that snoozed it polled again (its
	// fifth poll at the daemon's 200-220 ms interval, counted from the
	// fetch), and that River took the whole lot again, round after round,
	// before the other's poll came (the two daemons row, 100%/0% in one
	// run of three). Due again within 100-250 ms, a job left over is
	// waiting at about half the other daemon's polls.
	LaneShareSnooze = 100 * time.Millisecond
	laneShareJitter = 150 * time.Millisecond
	// LaneShareWait bounds how long after its insert, or after its
	// daemon gave it up for the share, a lane's job is left to another
	// daemon: past it, the daemon that fetches it runs it whatever it
	// holds, so a peer that is alive but takes no job (its workers busy,
	// frozen within its presence lease) delays the lane by this at most.
	LaneShareWait = 5 * time.Second
	// laneLeaveAfter is how long a lane runs here before it may be given
	// up for the share: a lane just taken is not handed on at once, and
	// two daemons never pass one to and fro.
	laneLeaveAfter = 3 * time.Second
	// laneLeaving is how long a lane given up still counts as leaving
	// (not running here) while its job ends: the next lane to leave
	// counts without it.
	laneLeaving = 2 * time.Second
	// peersFresh is how long a count of the daemons (Config.Peers, a
	// query) is used: every running lane asks at each yield check.
	peersFresh = time.Second
)

// shareSnooze is how long a lane's job left to another daemon waits.
func shareSnooze() time.Duration { return LaneShareSnooze + rand.N(laneShareJitter) }

// errShare ends a lane's job given up for the share: its job snoozes
// (shareSnooze) for another daemon to fetch. It is errMore for the
// rest (the lane has work; its source's error is cleared as after a run
// limit).
var errShare = fmt.Errorf("%w: a lane given up to another daemon", errMore)

// laneShare returns how many lanes of name's source this daemon may run
// at once when name is a lane's job younger than LaneShareWait (or given
// up here for the share within it) and Config.Peers says other daemons
// run: its share. 0 means no bound. It asks Peers (the database) before
// the job counts anything, so the count and the job's start are one step
// (awakenWithin).
func (e *Exporter) laneShare(ctx context.Context, name string, created time.Time) int {
	if _, _, ok := jobs.LaneOf(name); !ok {
		return 0
	}
	if e.since(created) > LaneShareWait && !e.leftRecently(name) {
		return 0
	}
	return e.shareOf(ctx, name)
}

// shareOf returns this daemon's share of the lanes of name's source, 0
// when it runs alone (or cannot tell).
func (e *Exporter) shareOf(ctx context.Context, name string) int {
	if _, ok := e.sourcesNow()[name]; !ok || e.cfg.Peers == nil {
		return 0
	}
	src := e.sourceOf(name)
	peers, err := e.peers(ctx, src)
	if err != nil || peers <= 1 {
		return 0
	}
	lanes := len(e.lanesOf(src))
	return (lanes + peers - 1) / peers
}

// peers is Config.Peers, asked at most every peersFresh a source.
func (e *Exporter) peers(ctx context.Context, src string) (int, error) {
	e.laneMu.Lock()
	c, ok := e.peersSeen[src]
	e.laneMu.Unlock()
	if ok && e.since(c.at) < peersFresh {
		return c.n, nil
	}
	n, err := e.cfg.Peers(ctx, src)
	if err != nil {
		return 0, err
	}
	e.laneMu.Lock()
	defer e.laneMu.Unlock()
	if e.peersSeen == nil {
		e.peersSeen = map[string]peersSeen{}
	}
	e.peersSeen[src] = peersSeen{n: n, at: e.now()}
	return n, nil
}

// peersSeen is a count of the daemons and when it was read.
type peersSeen struct {
	n  int
	at time.Time
}

// awakenWithin activates name's waker for a starting job (awaken) unless
// this daemon runs share lanes of name's source already (share 0: no
// bound). The count and the activation are one step under laneMu: River
// hands a daemon the lane jobs it fetches at once, and counting the
// lanes active before each had activated its own let one daemon take all
// 16 lanes of a fresh backlog while the other took none (the two daemons
// row of syncer-lab bench, in two of four runs). A job counts from here
// until its waker is deactivated, as a lane is counted active, never
// while it is still only fetched.
func (e *Exporter) awakenWithin(name string, share int) (a *awake, over bool) {
	if share <= 0 {
		return e.wakers.awaken(name), false
	}
	e.laneMu.Lock()
	defer e.laneMu.Unlock()
	if e.runningLanes(e.sourceOf(name)) >= share {
		return nil, true
	}
	return e.wakers.awaken(name), false
}

// leaveForShare reports whether the job of lane name, running here since
// started, should end so that another daemon takes the lane: this daemon
// runs more lanes of the source than its share, which happens when a
// daemon starts while this one runs every lane. Without it a new daemon
// took lanes only as their jobs reached their run limit (30 s). One lane
// leaves at a time: the lanes leaving are not counted as running.
func (e *Exporter) leaveForShare(ctx context.Context, name string, started time.Time) bool {
	if _, _, ok := jobs.LaneOf(name); !ok || e.since(started) < laneLeaveAfter {
		return false
	}
	share := e.shareOf(ctx, name)
	if share <= 0 {
		return false
	}
	e.laneMu.Lock()
	defer e.laneMu.Unlock()
	if e.runningLanes(e.sourceOf(name)) <= share {
		return false
	}
	if e.laneLeft == nil {
		e.laneLeft = map[string]time.Time{}
	}
	e.laneLeft[name] = e.now()
	return true
}

// runningLanes counts the lanes of src whose job is active here, but for
// those leaving. laneMu is held.
func (e *Exporter) runningLanes(src string) int {
	n := 0
	for _, name := range e.lanesOf(src) {
		if left, ok := e.laneLeft[name]; e.Active(name) && (!ok || e.since(left) >= laneLeaving) {
			n++
		}
	}
	return n
}

// leftRecently reports whether this daemon gave lane name up for the
// share within LaneShareWait: its job, fetched here again, is left to the
// daemon it was given to.
func (e *Exporter) leftRecently(name string) bool {
	e.laneMu.Lock()
	defer e.laneMu.Unlock()
	left, ok := e.laneLeft[name]
	return ok && e.since(left) <= LaneShareWait
}

// sourceOf returns the source a lane's name is of, name itself for any
// other feed.
func (e *Exporter) sourceOf(name string) string {
	if src, _, ok := jobs.LaneOf(name); ok {
		return src
	}
	return name
}
