package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// phase runs one phase: its exporter started, the writers at rate for
// sz.phase, until the exporter has every row.
func (b *shareBed) phase(ctx context.Context, ph sharePhase, rate int, sz shareSizes) (sharePhaseResult, error) {
	var res sharePhaseResult
	if err := b.triggers(ctx, ph == phaseSyncer || ph == phaseSyncerAsync); err != nil {
		return res, err
	}
	// Every phase starts from a checkpoint: one that fell in a phase
	// would charge it the others' writes.
	if _, err := b.watch.Exec(ctx, dbshareMark+`CHECKPOINT`); err != nil {
		return res, fmt.Errorf("bench: checkpoint: %w", err)
	}
	var wait func(ctx context.Context) error
	switch ph {
	case phaseWAL:
		stop, err := b.startReader(ctx)
		if err != nil {
			return res, err
		}
		defer stop()
	case phaseSyncer, phaseSyncerAsync:
		s := b.s
		if ph == phaseSyncerAsync {
			async := *b.s
			u, err := url.Parse(async.dsn)
			if err != nil {
				return res, err
			}
			q := u.Query()
			q.Set("synchronous_commit", "off")
			u.RawQuery = q.Encode()
			async.dsn = u.String()
			s = &async
		}
		d, err := b.r.startDaemon(ctx, s, b.f, false, "--config", b.config, "--thirdparty-url=")
		if err != nil {
			return res, err
		}
		defer d.stop()
		// The daemon's start is over before the writes begin.
		if err := warmUp(ctx, b.writers, b.f, insertOrder, 0); err != nil {
			return res, fmt.Errorf("%w: %s", err, d.stderr.String())
		}
		wait = func(ctx context.Context) error { return b.waitChanges(ctx, 2*time.Minute) }
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT public.pg_stat_statements_reset()`); err != nil {
		return res, err
	}
	wal0, err := b.walPosition(ctx)
	if err != nil {
		return res, err
	}
	cpu0, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	total := int(float64(rate) * sz.phase.Seconds())
	ws := sampleWaits(ctx, b.sampler)
	w, err := paced(ctx, b.writers, sz.writers, total, time.Second/time.Duration(rate), insertOrder)
	res.waits = ws.stop()
	if err != nil {
		return res, err
	}
	if ph == phaseWAL {
		wait = b.waitSlot
	}
	if wait != nil {
		if err := wait(ctx); err != nil {
			return res, err
		}
	}
	cpu1, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	wal1, err := b.walPosition(ctx)
	if err != nil {
		return res, err
	}
	res.walBytes = wal1 - wal0
	res.rows, res.rate = w.rows, w.rate()
	if res.cpu, err = b.classify(ctx, cpu0, cpu1); err != nil {
		return res, err
	}
	if res.top, err = b.topStatements(ctx); err != nil {
		return res, err
	}
	if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT COALESCE(sum(calls), 0) FROM public.pg_stat_statements
		WHERE query LIKE '%pg_notify%' AND query NOT LIKE '/* dbshare-bench */%'`).Scan(&res.notifies); err != nil {
		return res, err
	}
	return res, nil
}

// waitChanges waits until syncer's change table is empty: every row
// exported and marked.
func (b *shareBed) waitChanges(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var left bool
		if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT EXISTS (SELECT FROM syncer_changes)`).Scan(&left); err != nil {
			return err
		}
		if !left {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: changes still pending after %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// classify splits the CPU between two samples by the sessions'
// application names: the writers', the exporter's (syncer's sessions
// carry the scratch schema's name, the reader's walsender is one), the
// bench's watching session.
func (b *shareBed) classify(ctx context.Context, s0, s1 cpuSample) (shareCPU, error) {
	c := shareCPU{total: s1.total - s0.total}
	rows, err := b.watch.Query(ctx, dbshareMark+`SELECT pid, application_name, backend_type FROM pg_stat_activity`)
	if err != nil {
		return c, err
	}
	type sess struct {
		pid       int
		app, kind string
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sess, error) {
		var s sess
		var app, kind *string
		err := row.Scan(&s.pid, &app, &kind)
		if app != nil {
			s.app = *app
		}
		if kind != nil {
			s.kind = *kind
		}
		return s, err
	})
	if err != nil {
		return c, err
	}
	for _, s := range all {
		used := s1.byPID[s.pid] - s0.byPID[s.pid]
		switch {
		case s.app == dbshareWriters:
			c.writers += used
		case s.app == dbshareWatch:
			c.bench += used
		case s.app == b.s.name || s.kind == "walsender":
			c.exporter += used
		}
	}
	return c, nil
}

// topStatements reads the phase's costliest statements but the bench's.
func (b *shareBed) topStatements(ctx context.Context) ([]shareStmt, error) {
	rows, err := b.watch.Query(ctx, dbshareMark+`SELECT calls, total_exec_time, total_plan_time, rows, query FROM public.pg_stat_statements
		WHERE query NOT LIKE '/* dbshare-bench */%' ORDER BY total_exec_time DESC LIMIT `+topLimit())
	if err != nil {
		return nil, fmt.Errorf("bench: pg_stat_statements: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (shareStmt, error) {
		var s shareStmt
		err := row.Scan(&s.calls, &s.totalMS, &s.planMS, &s.rows, &s.query)
		return s, err
	})
}

// topLimit is how many statements a phase's top lists:
// SYNCER_BENCH_DBSHARE_TOP, else 8 (all of a pass's statements want
// some 30).
func topLimit() string {
	if v, err := strconv.Atoi(os.Getenv("SYNCER_BENCH_DBSHARE_TOP")); err == nil && v > 0 {
		return strconv.Itoa(v)
	}
	return "8"
}

// drain: n pending changes, written with the daemon stopped, then the
// daemon started and the database's CPU until they are all exported.
func (b *shareBed) drain(ctx context.Context, n int) (sharePhaseResult, error) {
	var res sharePhaseResult
	if err := b.triggers(ctx, true); err != nil {
		return res, err
	}
	b.r.progressf("   dbshare: drain of %s rows", count(float64(n)))
	if err := b.s.preloadOrders(ctx, "orders", n); err != nil {
		return res, err
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`CHECKPOINT`); err != nil {
		return res, err
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT public.pg_stat_statements_reset()`); err != nil {
		return res, err
	}
	cpu0, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	d, err := b.r.startDaemon(ctx, b.s, b.f, false, "--config", b.config, "--thirdparty-url=")
	if err != nil {
		return res, err
	}
	defer d.stop()
	if err := b.waitChanges(ctx, drainLimit(n)); err != nil {
		return res, fmt.Errorf("%w: %s", err, d.stderr.String())
	}
	cpu1, err := b.c.sampleCPU()
	if err != nil {
		return res, err
	}
	res.rows = int64(n)
	if res.cpu, err = b.classify(ctx, cpu0, cpu1); err != nil {
		return res, err
	}
	if res.top, err = b.topStatements(ctx); err != nil {
		return res, err
	}
	return res, nil
}
