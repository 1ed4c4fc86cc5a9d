package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// receiptCPURow sets the daemon's CPU per row exported at 500 inserts a
// second, resources' and a source's, against a plain polling exporter's
// on the same writes (issue 32: within 2x of it).
const receiptCPURow = "receipt: CPU per row at 500/s"

// pollerRun is what the plain poller did on a receipt case.
type pollerRun struct {
	cpuUS    float64 // its process's CPU per row exported, µs
	p50, p99 time.Duration
}

// receiptPoller runs case c (resources) with the plain poller looking
// every interval, a process of its own, where the daemon would be: the
// same fake, writers, warm-up and window of CPU time.
func (r *runner) receiptPoller(ctx context.Context, c receiptCase, every time.Duration) (pollerRun, error) {
	b, err := r.newReceiptBed(ctx, c)
	if err != nil {
		return pollerRun{}, err
	}
	defer b.close(ctx)
	total, f, s, pool := b.total, b.f, b.s, b.pool
	stderr := &tailBuffer{max: 16 << 10}
	cmd := exec.CommandContext(ctx, r.cfg.Lab, "bench-poller", "--database-url", s.dsn, "--url", f.url,
		"--every", every.String())
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		return pollerRun{}, fmt.Errorf("bench: plain poller: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("bench: plain poller: no exit 10 s after SIGTERM")
		}
	}
	defer func() { _ = stop() }()

	if err := warmUp(ctx, pool, f, plainInsert, int64(total)+1); err != nil {
		return pollerRun{}, fmt.Errorf("%w: %s", err, stderr.String())
	}
	r.progressf("   %s: plain poller (every %s, its own process), %d inserts/s for %s", receiptCPURow, every, c.rate, r.receiptFor())
	pid := strconv.Itoa(cmd.Process.Pid)
	cpu0, err := procCPUSeconds(pid)
	if err != nil {
		return pollerRun{}, err
	}
	w, err := paced(ctx, pool, c.writers, total, time.Second/time.Duration(c.rate), plainInsert)
	if err != nil {
		return pollerRun{}, err
	}
	if err := waitReceived(ctx, f.Server, w.ids, drainLimit(total)); err != nil {
		return pollerRun{}, fmt.Errorf("%w: %s", err, stderr.String())
	}
	cpu1, err := procCPUSeconds(pid)
	if err != nil {
		return pollerRun{}, err
	}
	if err := stop(); err != nil {
		return pollerRun{}, fmt.Errorf("bench: plain poller: %w: %s", err, stderr.String())
	}
	lat := receiptLatencies(f, w)
	return pollerRun{
		cpuUS: (cpu1 - cpu0) / float64(len(lat)) * 1e6,
		p50:   percentile(lat, 0.50),
		p99:   percentile(lat, 0.99),
	}, nil
}

// receiptCPU is receiptCPURow, from the rows of resources and of a source
// at 500 inserts a second and the plain poller's run on resources.
func receiptCPU(rows []Row, p pollerRun) (Row, bool) {
	var res, src *Row
	for i := range rows {
		switch rows[i].Scenario {
		case receiptCases[0].row:
			res = &rows[i]
		case receiptCases[1].row:
			src = &rows[i]
		}
	}
	if res == nil || src == nil || p.cpuUS <= 0 {
		return Row{}, false
	}
	resUS, srcUS := res.Values["daemon_cpu_us_per_row"], src.Values["daemon_cpu_us_per_row"]
	resX, srcX := resUS/p.cpuUS, srcUS/p.cpuUS
	return Row{
		Scenario: receiptCPURow,
		Measured: fmt.Sprintf("daemon %.0f µs (resources, p50 %.1f ms), %.0f µs (a source, p50 %.1f ms)",
			resUS, res.Values["p50_ms"], srcUS, src.Values["p50_ms"]),
		Baseline: fmt.Sprintf("plain poller %.0f µs (every %s, its own process; p50 %s, p99 %s)", p.cpuUS, pollerEvery, ms(p.p50), ms(p.p99)),
		Figure:   fmt.Sprintf("%.2fx, %.2fx", resX, srcX),
		Target:   "<= 2.00x each",
		Pass:     resX <= 2 && srcX <= 2,
		Values: map[string]float64{"resources_ratio": resX, "source_ratio": srcX, "poller_cpu_us_per_row": p.cpuUS,
			"resources_cpu_us_per_row": resUS, "source_cpu_us_per_row": srcUS,
			"poller_p50_ms": msf(p.p50), "poller_p99_ms": msf(p.p99)},
	}, true
}
