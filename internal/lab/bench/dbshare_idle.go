package bench

import (
	"context"
	"fmt"
	"os"
	"time"
)

// The idle daemon's share (issue 57): what the daemon's periodic work
// costs the database whatever the rate (River's polls, the relay's,
// presence, gauges, the history's tidying, leases, the hot passes that
// find nothing). At 500 rows a second, an idle daemon's database CPU a
// second divided by 500 is part of the per-row figure. Run when
// SYNCER_BENCH_DBSHARE_IDLE is a duration ("30s"), before the rates:
// three sources, each to its own destination, no writes, the cluster's
// CPU and pg_stat_statements over the window.

// idleWindow is SYNCER_BENCH_DBSHARE_IDLE's duration; 0 for none.
func idleWindow() time.Duration {
	d, err := time.ParseDuration(os.Getenv("SYNCER_BENCH_DBSHARE_IDLE"))
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// idle runs the daemon with three sources and no writes for window and
// notes the database's CPU a second and its statements.
func (b *shareBed) idle(ctx context.Context, window time.Duration) error {
	srcs := []benchSource{{table: "orders", destination: "api", url: b.f.url}}
	for _, t := range []string{"orders_b", "orders_c"} {
		srcs = append(srcs, benchSource{table: t, destination: "api_" + t, url: b.f.url})
	}
	cfg, err := writeSourceConfig(b.dir, srcs)
	if err != nil {
		return err
	}
	if err := b.s.installSources(ctx, cfg, "orders_b", "orders_c"); err != nil {
		return err
	}
	d, err := b.r.startDaemon(ctx, b.s, b.f, false, "--config", cfg, "--thirdparty-url=")
	if err != nil {
		return err
	}
	defer d.stop()
	// The daemon's start (migrations, the first passes) is not idle.
	if err := warmUp(ctx, b.writers, b.f, insertOrder, 0); err != nil {
		return fmt.Errorf("%w: %s", err, d.stderr.String())
	}
	if err := b.waitChanges(ctx, time.Minute); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Second):
	}
	b.r.progressf("   dbshare: an idle daemon of 3 sources, %s", window)
	if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT public.pg_stat_statements_reset()`); err != nil {
		return err
	}
	cpu0, err := b.c.sampleCPU()
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(window):
	}
	cpu1, err := b.c.sampleCPU()
	if err != nil {
		return err
	}
	c, err := b.classify(ctx, cpu0, cpu1)
	if err != nil {
		return err
	}
	rows, err := b.watch.Query(ctx, dbshareMark+`SELECT calls, total_exec_time, query FROM public.pg_stat_statements
		WHERE query NOT LIKE '/* dbshare-bench */%' ORDER BY calls DESC, total_exec_time DESC LIMIT 40`)
	if err != nil {
		return fmt.Errorf("bench: pg_stat_statements: %w", err)
	}
	var top []shareStmt
	var calls int64
	var ms float64
	for rows.Next() {
		var s shareStmt
		if err := rows.Scan(&s.calls, &s.totalMS, &s.query); err != nil {
			rows.Close()
			return err
		}
		calls += s.calls
		ms += s.totalMS
		top = append(top, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	secs := window.Seconds()
	b.r.note("dbshare idle, 3 sources, %s: database %.2f ms of CPU a second (syncer's sessions %.2f), %.1f µs a row at 500/s; statements %.1f a second, %.2f ms of execution a second (the 40 most called); by calls (calls, total ms, ms a call):\n%s",
		window, c.db()/secs*1e3, c.exporter/secs*1e3, c.db()/secs/500*1e6, float64(calls)/secs, ms/secs, formatTop(top))
	return nil
}
