// Package status gathers what `syncer status` reports, from the database
// alone, so it tells the same truth whichever machine asks and whether or not
// a daemon runs there.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/resources"
)

// Report is the status. The first six fields are the contract's keys.
type Report struct {
	Total                    int64   `json:"total"`
	Unsynced                 int64   `json:"unsynced"`
	Synced                   int64   `json:"synced"`
	Failed                   int64   `json:"failed"`
	OutboxPending            int64   `json:"outbox_pending"`
	OldestUnsyncedAgeSeconds float64 `json:"oldest_unsynced_age_seconds"`

	Pending        int64          `json:"pending"`
	Lock           Lock           `json:"lock"`
	Breaker        Breaker        `json:"breaker"`
	Credentials    Credentials    `json:"credentials"`
	Checkpoints    []Checkpoint   `json:"checkpoints"`
	Replays        []Replay       `json:"replays"`
	RecentFailures []Failure      `json:"recent_failures"`
	Jobs           map[string]int `json:"jobs"`
}

// Lock says who holds the export lock.
type Lock struct {
	Held            bool   `json:"held"`
	PID             int    `json:"pid,omitempty"`
	ApplicationName string `json:"application_name,omitempty"`
	ClientAddr      string `json:"client_addr,omitempty"`
}

// Breaker is the shared circuit breaker's state.
type Breaker struct {
	State string    `json:"state"`
	Until time.Time `json:"until,omitzero"`
}

// Credentials says whether the third party refused our token.
type Credentials struct {
	Refused bool      `json:"refused"`
	Since   time.Time `json:"since,omitzero"`
	Message string    `json:"message,omitempty"`
}

// Checkpoint is a job's position.
type Checkpoint struct {
	Name        string    `json:"name"`
	LastID      int64     `json:"last_id"`
	RowsDone    int64     `json:"rows_done"`
	RowsFailed  int64     `json:"rows_failed"`
	BatchesDone int64     `json:"batches_done"`
	InFlight    int       `json:"batches_in_flight"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Replay is a replay's progress.
type Replay struct {
	ID        int64     `json:"id"`
	State     string    `json:"state"`
	TotalRows int64     `json:"total_rows"`
	RowsDone  int64     `json:"rows_done"`
	Percent   float64   `json:"percent"`
	CreatedAt time.Time `json:"created_at"`
}

// Failure is a failed row.
type Failure struct {
	ID       int64     `json:"id"`
	Version  int64     `json:"version"`
	FailedAt time.Time `json:"failed_at"`
	Error    string    `json:"error"`
}

// State keys in syncer_state that status reads. The delivery package writes
// them: KeyBreaker is where gobreaker keeps the shared state of the breaker
// named delivery.BreakerName.
const (
	KeyBreaker     = "gobreaker:state:thirdparty"
	KeyCredentials = "credentials"
)

// Gather builds the report.
func Gather(ctx context.Context, pool *pgxpool.Pool) (*Report, error) {
	r := &Report{Jobs: map[string]int{}, Breaker: Breaker{State: "closed"}}
	c, err := resources.CountAll(ctx, pool)
	if err != nil {
		return nil, err
	}
	r.Total, r.Unsynced, r.Synced, r.Failed = c.Total, c.Unsynced, c.Synced, c.Failed
	r.Pending = c.Unsynced - c.Failed
	r.OldestUnsyncedAgeSeconds = c.OldestUnsyncedAge.Seconds()
	if r.OutboxPending, err = outbox.Pending(ctx, pool); err != nil {
		return nil, err
	}

	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return nil, fmt.Errorf("status: schema: %w", err)
	}
	key := exporter.LockKey(schema)
	var pid *int32
	var app, addr *string
	err = pool.QueryRow(ctx, `SELECT l.pid, a.application_name, host(a.client_addr)
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.objsubid = 1`,
		int64(uint32(uint64(key)>>32)), int64(uint32(key))).Scan(&pid, &app, &addr)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("status: lock holder: %w", err)
	default:
		r.Lock.Held = true
		if pid != nil {
			r.Lock.PID = int(*pid)
		}
		if app != nil {
			r.Lock.ApplicationName = *app
		}
		if addr != nil {
			r.Lock.ClientAddr = *addr
		}
	}

	if err := readState(ctx, pool, r); err != nil {
		return nil, err
	}

	cps, err := checkpoint.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	done := map[string]int64{}
	for _, cp := range cps {
		r.Checkpoints = append(r.Checkpoints, Checkpoint{
			Name: cp.Name, LastID: cp.LastID, RowsDone: cp.RowsDone, RowsFailed: cp.RowsFailed,
			BatchesDone: cp.BatchesDone, InFlight: cp.InFlight, UpdatedAt: cp.UpdatedAt,
		})
		done[cp.Name] = cp.RowsDone + cp.RowsFailed
	}

	rows, err := pool.Query(ctx, `SELECT id, state, total_rows, created_at FROM syncer_replays
		ORDER BY (state IN ('pending', 'running')) DESC, id DESC LIMIT 20`)
	if err != nil {
		return nil, fmt.Errorf("status: replays: %w", err)
	}
	r.Replays, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Replay, error) {
		var rp Replay
		err := row.Scan(&rp.ID, &rp.State, &rp.TotalRows, &rp.CreatedAt)
		rp.RowsDone = done[checkpoint.Replay(rp.ID)]
		rp.Percent = Percent(rp.RowsDone, rp.TotalRows, rp.State)
		return rp, err
	})
	if err != nil {
		return nil, fmt.Errorf("status: replays: %w", err)
	}

	fails, err := resources.RecentFailures(ctx, pool, 10)
	if err != nil {
		return nil, err
	}
	for _, f := range fails {
		r.RecentFailures = append(r.RecentFailures, Failure(f))
	}

	jrows, err := pool.Query(ctx, `SELECT kind || ':' || state::text, count(*)::int FROM river_job
		WHERE kind LIKE 'syncer_%' AND state NOT IN ('completed', 'discarded', 'cancelled') GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("status: jobs: %w", err)
	}
	var k string
	var n int
	if _, err := pgx.ForEachRow(jrows, []any{&k, &n}, func() error { r.Jobs[k] = n; return nil }); err != nil {
		return nil, fmt.Errorf("status: jobs: %w", err)
	}
	return r, nil
}

// Percent is a replay's progress; a done replay is 100 whatever it counted.
func Percent(done, total int64, state string) float64 {
	if state == "done" || total == 0 {
		if state == "done" {
			return 100
		}
		return 0
	}
	return min(100, float64(done)*100/float64(total))
}

func readState(ctx context.Context, pool *pgxpool.Pool, r *Report) error {
	rows, err := pool.Query(ctx, `SELECT key, value FROM syncer_state WHERE key = ANY($1)`, []string{KeyBreaker, KeyCredentials})
	if err != nil {
		return fmt.Errorf("status: state: %w", err)
	}
	var key string
	var value []byte
	_, err = pgx.ForEachRow(rows, []any{&key, &value}, func() error {
		switch key {
		case KeyBreaker:
			state, until := BreakerState(value, time.Now())
			r.Breaker.State = BreakerStateName(state)
			r.Breaker.Until = until
		case KeyCredentials:
			_ = json.Unmarshal(value, &r.Credentials)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("status: state: %w", err)
	}
	return nil
}

// BreakerState reads gobreaker's shared state: 0 closed, 1 half-open, 2
// open, and until when it stays open. An open state whose timeout has
// passed is half-open: gobreaker only writes that down at the next request.
func BreakerState(raw []byte, now time.Time) (int, time.Time) {
	var b struct {
		State  int       `json:"state"`
		Expiry time.Time `json:"expiry"`
	}
	if json.Unmarshal(raw, &b) != nil {
		return 0, time.Time{}
	}
	if b.State == 2 {
		if !b.Expiry.IsZero() && !b.Expiry.After(now) {
			return 1, time.Time{}
		}
		return 2, b.Expiry
	}
	return b.State, time.Time{}
}

// BreakerStateName names gobreaker's states.
func BreakerStateName(s int) string {
	switch s {
	case 1:
		return "half-open"
	case 2:
		return "open"
	default:
		return "closed"
	}
}
