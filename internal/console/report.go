package console

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/status"
)

// failuresRead is how many failures the report reads: a source's page
// shows those of its source among them.
const failuresRead = 200

// reports reads status at most once per every, whoever looks and however
// many pages they have open: the console's cost to the database has a
// ceiling of one status read per every, and none while nobody looks.
// Concurrent pages wait for the one read under way.
type reports struct {
	pool  *pgxpool.Pool
	every time.Duration

	mu  sync.Mutex
	at  time.Time
	rep *status.Report
}

// get returns a report at most every old.
func (r *reports) get(ctx context.Context, now time.Time) (*status.Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rep != nil && now.Sub(r.at) < r.every {
		return r.rep, nil
	}
	rep, err := status.Gather(ctx, r.pool, &status.Config{RecentFailures: failuresRead})
	if err != nil {
		return nil, err
	}
	r.rep, r.at = rep, now
	return rep, nil
}

// forget makes the next page read status again: after an action, the page
// shows what it did.
func (r *reports) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep = nil
}
