package soak

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
)

// lockWatch is the check that no daemon holds the export lock without
// knowing it: the lock's holder, by pg_locks, must be a daemon whose
// syncer_lock_held says 1. A holder that says 0 at two looks in a row,
// with the same server session holding the lock, is a violation (one look
// could fall between taking the lock and setting the gauge).
type lockWatch struct {
	suspect int // the backend pid that said 0 at the last look; 0 for none
}

func (r *run) checkLock(ctx context.Context, w *lockWatch) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	h, held, err := locks.HolderOf(ctx, r.pool, locks.ExportKey("public", jobs.Resources))
	if err != nil || !held {
		w.suspect = 0
		return
	}
	for _, d := range r.daemons {
		d.mu.Lock()
		mine := d.cmd != nil && !d.down && !d.stopped && d.cmd.Process.Pid == h.Process
		addr := d.httpAddr
		d.mu.Unlock()
		if !mine {
			continue
		}
		knows, err := lockGauge(ctx, addr)
		if err != nil || knows {
			w.suspect = 0
			return
		}
		if w.suspect == h.PID {
			r.rep.violate(r.since(), fmt.Sprintf("daemon %d (pid %d) holds the export lock (server pid %d) and says it does not", d.i, h.Process, h.PID))
		}
		w.suspect = h.PID
		return
	}
	w.suspect = 0
}

// lockGauge reads syncer_lock_held from a daemon's /metrics.
func lockGauge(ctx context.Context, addr string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "syncer_lock_held "); ok {
			return strings.TrimSpace(v) != "0", nil
		}
	}
	return false, fmt.Errorf("soak: no syncer_lock_held at %s", addr)
}
