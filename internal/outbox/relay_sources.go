package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/migrations"
)

// relaySources turns the events of the configured sources into one
// waiting job per source with events, as relay does for resources: a job
// is inserted only when none waits for that source. poll also enqueues for
// sources with pending changes or an unfinished snapshot and no waiting
// job, which covers events the shut gate or a lost notification kept
// from the relay.
func (r *Relay) relaySources(ctx context.Context, poll bool) error {
	if len(r.cfg.Sources) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", r.cfg.LockKey); err != nil {
			return err
		}
		ops := make([]string, len(r.cfg.Sources))
		for i, name := range r.cfg.Sources {
			ops[i] = migrations.SourceOp(name)
		}
		rows, err := tx.Query(ctx, `SELECT id, op FROM syncer_outbox WHERE op = ANY($1)
			ORDER BY id LIMIT 10000 FOR UPDATE SKIP LOCKED`, ops)
		if err != nil {
			return err
		}
		var ids []int64
		want := map[string]bool{}
		var id int64
		var op string
		if _, err := pgx.ForEachRow(rows, []any{&id, &op}, func() error {
			ids = append(ids, id)
			want[strings.TrimPrefix(op, migrations.SourceOpPrefix)] = true
			return nil
		}); err != nil {
			return err
		}
		if poll {
			names, err := sources.WithWork(ctx, tx, r.cfg.Sources)
			if err != nil {
				return err
			}
			for _, n := range names {
				want[n] = true
			}
		}
		// A source whose job lingers here takes the notification (or, on a
		// poll, a nudge to look, for work whose event was lost) instead of
		// a new job: it looks at its table after this round.
		woken := 0
		for n := range want {
			if r.waker != nil && r.waker.Wake(n) {
				delete(want, n)
				woken++
			}
		}
		if len(want) == 0 {
			if len(ids) > 0 {
				if _, err := tx.Exec(ctx, `DELETE FROM syncer_outbox WHERE id = ANY($1)`, ids); err != nil {
					return err
				}
			}
			r.update(func(s *Stats) {
				s.EventsRelayed += int64(len(ids))
				s.SourcesWoken += int64(woken)
			})
			return nil
		}
		res, err := r.river.JobListTx(ctx, tx, river.NewJobListParams().
			Kinds(jobs.SourceArgs{}.Kind()).States(waitingStates...).First(10000))
		if err != nil {
			return fmt.Errorf("list source jobs: %w", err)
		}
		for _, j := range res.Jobs {
			var args jobs.SourceArgs
			if json.Unmarshal(j.EncodedArgs, &args) == nil {
				delete(want, args.Source)
			}
		}
		inserted := 0
		for _, n := range r.cfg.Sources {
			if !want[n] {
				continue
			}
			if _, err := r.river.InsertTx(ctx, tx, jobs.SourceArgs{Source: n}, nil); err != nil {
				return fmt.Errorf("insert source job: %w", err)
			}
			inserted++
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM syncer_outbox WHERE id = ANY($1)`, ids); err != nil {
				return err
			}
		}
		r.update(func(s *Stats) {
			s.JobsInserted += int64(inserted)
			s.EventsRelayed += int64(len(ids))
			s.SourcesWoken += int64(woken)
		})
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: relay sources: %w", err)
	}
	return nil
}
