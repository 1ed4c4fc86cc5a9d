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
	"sync"
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

// laneShares is this daemon's share of each tenant source's lanes when
// other daemons export it too: how many it runs at once, which it gave up
// and when. It decides only whether a lane's job starts or stays here;
// River and the other daemons do the rest.
type laneShares struct {
	// peersOf is Config.Peers: nil keeps no share.
	peersOf func(ctx context.Context, source string) (int, error)
	now     func() time.Time
	// exported reports whether name is exported here; lanesOf lists the
	// lanes of source src.
	exported func(name string) bool
	lanesOf  func(src string) []string
	wakers   *wakers

	// mu makes a lane job's count of the lanes running here and its
	// start one step (awakenWithin), and guards left, the lanes given up
	// for the share and when, and seen.
	mu   sync.Mutex
	left map[string]time.Time
	seen map[string]peersSeen
}

func (ls *laneShares) since(t time.Time) time.Duration { return ls.now().Sub(t) }

// atStart returns how many lanes of name's source this daemon may run
// at once when name is a lane's job younger than LaneShareWait (or given
// up here for the share within it) and Config.Peers says other daemons
// run: its share. 0 means no bound. It asks Peers (the database) before
// the job counts anything, so the count and the job's start are one step
// (awakenWithin).
func (ls *laneShares) atStart(ctx context.Context, name string, created time.Time) int {
	if _, _, ok := jobs.LaneOf(name); !ok {
		return 0
	}
	if ls.since(created) > LaneShareWait && !ls.leftRecently(name) {
		return 0
	}
	return ls.of(ctx, name)
}

// of returns this daemon's share of the lanes of name's source, 0
// when it runs alone (or cannot tell).
func (ls *laneShares) of(ctx context.Context, name string) int {
	if ls.peersOf == nil || !ls.exported(name) {
		return 0
	}
	src := sourceOfLane(name)
	peers, err := ls.peers(ctx, src)
	if err != nil || peers <= 1 {
		return 0
	}
	lanes := len(ls.lanesOf(src))
	return (lanes + peers - 1) / peers
}

// peers is Config.Peers, asked at most every peersFresh a source.
func (ls *laneShares) peers(ctx context.Context, src string) (int, error) {
	ls.mu.Lock()
	c, ok := ls.seen[src]
	ls.mu.Unlock()
	if ok && ls.since(c.at) < peersFresh {
		return c.n, nil
	}
	n, err := ls.peersOf(ctx, src)
	if err != nil {
		return 0, err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.seen == nil {
		ls.seen = map[string]peersSeen{}
	}
	ls.seen[src] = peersSeen{n: n, at: ls.now()}
	return n, nil
}

// peersSeen is a count of the daemons and when it was read.
type peersSeen struct {
	n  int
	at time.Time
}

// awakenWithin activates name's waker for a starting job (awaken) unless
// this daemon runs share lanes of name's source already (share 0: no
// bound). The count and the activation are one step under mu: River
// hands a daemon the lane jobs it fetches at once, and counting the
// lanes active before each had activated its own let one daemon take all
// 16 lanes of a fresh backlog while the other took none (the two daemons
// row of syncer-lab bench, in two of four runs). A job counts from here
// until its waker is deactivated, as a lane is counted active, never
// while it is still only fetched.
func (ls *laneShares) awakenWithin(name string, share int) (a *awake, over bool) {
	if share <= 0 {
		return ls.wakers.awaken(name), false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.running(sourceOfLane(name)) >= share {
		return nil, true
	}
	return ls.wakers.awaken(name), false
}

// leaveForShare reports whether the job of lane name, running here since
// started, should end so that another daemon takes the lane: this daemon
// runs more lanes of the source than its share, which happens when a
// daemon starts while this one runs every lane. Without it a new daemon
// took lanes only as their jobs reached their run limit (30 s). One lane
// leaves at a time: the lanes leaving are not counted as running.
func (ls *laneShares) leaveForShare(ctx context.Context, name string, started time.Time) bool {
	return ls.leave(ctx, name, started, true)
}

// wouldLeave is leaveForShare's answer, with nothing noted: a lane's
// pass asks it before it goes on (lanepass.go).
func (ls *laneShares) wouldLeave(ctx context.Context, name string, started time.Time) bool {
	return ls.leave(ctx, name, started, false)
}

func (ls *laneShares) leave(ctx context.Context, name string, started time.Time, note bool) bool {
	if _, _, ok := jobs.LaneOf(name); !ok || ls.since(started) < laneLeaveAfter {
		return false
	}
	share := ls.of(ctx, name)
	if share <= 0 {
		return false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.running(sourceOfLane(name)) <= share {
		return false
	}
	if !note {
		return true
	}
	if ls.left == nil {
		ls.left = map[string]time.Time{}
	}
	ls.left[name] = ls.now()
	return true
}

// running counts the lanes of src whose job is active here, but for
// those leaving. mu is held.
func (ls *laneShares) running(src string) int {
	n := 0
	for _, name := range ls.lanesOf(src) {
		if left, ok := ls.left[name]; ls.wakers.of(name).isActive() && (!ok || ls.since(left) >= laneLeaving) {
			n++
		}
	}
	return n
}

// leftRecently reports whether this daemon gave lane name up for the
// share within LaneShareWait: its job, fetched here again, is left to the
// daemon it was given to.
func (ls *laneShares) leftRecently(name string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	left, ok := ls.left[name]
	return ok && ls.since(left) <= LaneShareWait
}

// sourceOfLane returns the source a lane's name is of, name itself for any
// other feed.
func sourceOfLane(name string) string {
	if src, _, ok := jobs.LaneOf(name); ok {
		return src
	}
	return name
}
