package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitSampler counts, every 20 ms while the writers write, what their
// backends are doing (pg_stat_activity's wait event; "CPU" for an active
// backend that waits on nothing, "idle" between their statements): where
// a writer's time goes beside the CPU the phase counts.
type waitSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	counts map[string]int
	n      int
}

// conn is a session of the bench's own, kept open between phases (its
// backend's CPU is the bench's only while it runs), and never cancelled
// in a query: pgx closes a connection whose query is cancelled.
func sampleWaits(ctx context.Context, conn *pgx.Conn) *waitSampler {
	stop, cancel := context.WithCancel(ctx)
	w := &waitSampler{cancel: cancel, done: make(chan struct{}), counts: map[string]int{}}
	go func() {
		defer close(w.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			rows, err := conn.Query(ctx, dbshareMark+`SELECT CASE WHEN state <> 'active' THEN 'idle'
				WHEN wait_event IS NULL THEN 'CPU' ELSE wait_event_type || ':' || wait_event END
				FROM pg_stat_activity WHERE application_name = $1`, dbshareWriters)
			if err == nil {
				states, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err == nil {
					for _, s := range states {
						w.counts[s]++
						w.n++
					}
				}
			}
			select {
			case <-stop.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// stop ends the sampling and says what share of the samples each state
// took, the most first.
func (w *waitSampler) stop() string {
	w.cancel()
	<-w.done
	type share struct {
		state string
		n     int
	}
	var all []share
	for s, n := range w.counts {
		all = append(all, share{s, n})
	}
	slices.SortFunc(all, func(a, b share) int { return b.n - a.n })
	var parts []string
	for _, s := range all {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", s.state, float64(s.n)*100/float64(max(w.n, 1))))
	}
	return strings.Join(parts, ", ")
}
