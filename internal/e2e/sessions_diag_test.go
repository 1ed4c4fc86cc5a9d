package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// sessionWatch snapshots, every second until stopped, what the sessions
// of the test's schema (its daemon's, and the test's own but the
// snapshot's) run and wait on, and the daemon's pool gauges from /metrics
// at addr: what to read when a test of a locked table fails (which of the
// daemon's connections waited on the lock, and for how long), and how many
// waited on the lock of holder (a backend pid) at once.
type sessionWatch struct {
	mu    sync.Mutex
	lines []string
	// most is the most sessions seen waiting on holder in one snapshot.
	most int
	stop chan struct{}
	done chan struct{}
}

func (w *tenantWorld) watchSessions(t *testing.T, addr string, holder int, since time.Time) *sessionWatch {
	t.Helper()
	sw := &sessionWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sw.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			sw.snap(w, addr, holder, since)
			select {
			case <-sw.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(sw.end)
	return sw
}

// end stops the snapshots; it may be called more than once.
func (sw *sessionWatch) end() {
	select {
	case <-sw.stop:
	default:
		close(sw.stop)
	}
	<-sw.done
}

// mostWaiting is the most sessions seen waiting on the holder's lock in
// one snapshot.
func (sw *sessionWatch) mostWaiting() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.most
}

func (sw *sessionWatch) String() string {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return strings.Join(sw.lines, "\n")
}

func (sw *sessionWatch) snap(w *tenantWorld, addr string, holder int, since time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "-- %.1fs", time.Since(since).Seconds())
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		text, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		for _, l := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(l, "syncer_db_pool_connections") || strings.HasPrefix(l, "syncer_db_pool_acquire_waits_total") {
				b.WriteString(" | " + l)
			}
		}
	}
	waiting := 0
	rows, err := w.pool.Query(ctx, `SELECT pid, coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, ''),
		coalesce(extract(epoch FROM now() - query_start)::numeric(10,1)::text, ''), $1 = ANY(pg_blocking_pids(pid)),
		left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_activity WHERE datname = current_database() AND application_name = current_setting('application_name')
		AND pid <> pg_backend_pid() ORDER BY pid`, holder)
	if err == nil {
		for rows.Next() {
			var pid int
			var state, wt, we, age, q string
			var blocked bool
			if err = rows.Scan(&pid, &state, &wt, &we, &age, &blocked, &q); err != nil {
				break
			}
			mark := ""
			if blocked {
				waiting++
				mark = " (waits on the lock)"
			}
			fmt.Fprintf(&b, "\n   %d %s %s:%s %ss%s %s", pid, state, wt, we, age, mark, q)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		fmt.Fprintf(&b, "\n   pg_stat_activity: %v", err)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.lines = append(sw.lines, b.String())
	sw.most = max(sw.most, waiting)
}
