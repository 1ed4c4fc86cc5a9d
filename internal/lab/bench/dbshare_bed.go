package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// shareBed is what the phases share: the cluster, the scratch schema on
// it with the source installed, the fake, the configuration, the
// writers' pool and the watching session.
type shareBed struct {
	r       *runner // a runner on the cluster
	c       *cluster
	s       *scratch
	f       *fake
	config  string
	writers *pgxpool.Pool
	watch   *pgx.Conn
	sampler *pgx.Conn // the writers' waits' (dbshare_waits.go)
	enabled bool      // syncer's triggers on orders
	dir     string
}

func (r *runner) newShareBed(ctx context.Context, sz shareSizes) (_ *shareBed, err error) {
	b := &shareBed{}
	defer func() {
		if err != nil {
			b.close(ctx)
		}
	}()
	r.progressf("   dbshare: a scratch cluster from %s", pgBin())
	if b.c, err = startCluster(ctx); err != nil {
		return nil, err
	}
	// A runner on the cluster: the scratch schema, the daemon and its
	// migrations all go there.
	b.r = &runner{cfg: r.cfg, sizes: r.sizes, report: r.report}
	b.r.cfg.DatabaseURL = b.c.url
	total := 0
	for _, rate := range sz.rates {
		total += int(float64(rate)*sz.phase.Seconds()) * sz.rounds
	}
	if b.f, err = startFake(total + sz.drainRows); err != nil {
		return nil, err
	}
	if b.dir, err = os.MkdirTemp("", "syncer-bench-"); err != nil {
		return nil, err
	}
	if b.config, err = writeSourceConfig(b.dir, []benchSource{{table: "orders", destination: "api", url: b.f.url}}); err != nil {
		return nil, err
	}
	if b.s, err = b.r.newScratch(ctx, "dbshare", false); err != nil {
		return nil, err
	}
	if err := b.s.installSources(ctx, b.config, "orders"); err != nil {
		return nil, err
	}
	b.enabled = true
	if _, err := b.s.pool.Exec(ctx, `CREATE PUBLICATION `+dbsharePub+` FOR TABLE orders`); err != nil {
		return nil, fmt.Errorf("bench: publication: %w", err)
	}
	dsn, err := appNamed(b.s.dsn, dbshareWriters)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns, pc.MinConns = int32(sz.writers), int32(sz.writers)
	if b.writers, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	if dsn, err = appNamed(b.s.dsn, dbshareWatch); err != nil {
		return nil, err
	}
	if b.watch, err = pgx.Connect(ctx, dsn); err != nil {
		return nil, err
	}
	if b.sampler, err = pgx.Connect(ctx, dsn); err != nil {
		return nil, err
	}
	return b, nil
}

// appNamed is dsn with its sessions' application_name set to name.
func appNamed(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (b *shareBed) close(ctx context.Context) {
	for _, c := range []*pgx.Conn{b.watch, b.sampler} {
		if c != nil {
			c.Close(context.WithoutCancel(ctx))
		}
	}
	if b.writers != nil {
		b.writers.Close()
	}
	if b.s != nil {
		b.s.drop(ctx)
	}
	if b.f != nil {
		b.f.close()
	}
	if b.c != nil {
		b.c.stop()
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// triggers enables or disables syncer's triggers on orders.
func (b *shareBed) triggers(ctx context.Context, on bool) error {
	if b.enabled == on {
		return nil
	}
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	if _, err := b.watch.Exec(ctx, dbshareMark+`ALTER TABLE orders `+verb+` TRIGGER USER`); err != nil {
		return fmt.Errorf("bench: %s triggers: %w", verb, err)
	}
	b.enabled = on
	return nil
}

// walPosition reads the cluster's WAL position, in bytes.
func (b *shareBed) walPosition(ctx context.Context) (float64, error) {
	var wal float64
	err := b.watch.QueryRow(ctx, dbshareMark+`SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&wal)
	return wal, err
}

// startReader creates the slot and starts pg_recvlogical on it, and
// waits until its walsender streams; the stop it returns ends the reader
// and drops the slot. The slot is the phase's only: one kept between
// phases would make the reader decode the other phases' WAL.
func (b *shareBed) startReader(ctx context.Context) (func(), error) {
	if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, dbshareSlot); err != nil {
		return nil, fmt.Errorf("bench: create the slot: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for range 50 {
			if _, err := b.watch.Exec(ctx, dbshareMark+`SELECT pg_drop_replication_slot($1)`, dbshareSlot); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// -F 0: no fsync of the output, which is /dev/null, and the position
	// reported as flushed at once, every second (-s 1).
	cmd := exec.Command(filepath.Join(b.c.bin, "pg_recvlogical"),
		"-d", strings.Replace(b.c.url, "postgres://", "postgresql://", 1)+"?application_name=pg_recvlogical",
		"--slot", dbshareSlot, "--start", "-f", "/dev/null", "-F", "0", "-s", "1", "-n",
		"-o", "proto_version=1", "-o", "publication_names="+dbsharePub)
	out := &tailBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		drop()
		return nil, fmt.Errorf("bench: start pg_recvlogical: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		drop()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT active FROM pg_replication_slots WHERE slot_name = $1`, dbshareSlot).Scan(&active); err != nil {
			stop()
			return nil, fmt.Errorf("bench: read the slot: %w", err)
		}
		if active {
			return stop, nil
		}
		select {
		case <-done:
			drop()
			return nil, fmt.Errorf("bench: pg_recvlogical exited: %s", out.String())
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("bench: pg_recvlogical not streaming after 30 s: %s", out.String())
		}
	}
}

// waitSlot waits until the reader confirmed the WAL written so far.
func (b *shareBed) waitSlot(ctx context.Context) error {
	var lsn string
	if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var done bool
		if err := b.watch.QueryRow(ctx, dbshareMark+`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, dbshareSlot, lsn).Scan(&done); err != nil {
			return fmt.Errorf("bench: read the slot: %w", err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the WAL reader did not confirm %s in a minute", lsn)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
