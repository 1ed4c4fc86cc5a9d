package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// The formats scenarios (issue 21): the destination formats of docs/protocol.md
// section 6, each against the syncer format in the same run.
//
//   - cloudevents drain, elasticsearch drain: the drain row's rows to the
//     fake speaking the format (--thirdparty-format), against the syncer
//     format's drain, alternating. Targets >= 0.8x.
//   - custom drain: a configured source's rows through a jq body and a
//     rejected program (a HubSpot-like API), against the same source
//     drained in the syncer format, alternating. Target >= 0.6x.
//   - webhooks: 20,000 rows, one signed standard-webhooks request each, 16
//     in flight, to a local receiver that answers at once, against a plain
//     Go client sending the same signed requests, 16 at once, to the same
//     receiver. Target >= 0.7x.

// benchSecret signs the webhooks scenario's requests.
const benchSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// formatDrain is a drain row of a format that takes its settings.
func (r *runner) formatDrain(ctx context.Context, row, format, path string, target float64) ([]Row, error) {
	n := r.sizes.DrainRows
	base, rate, err := r.alternate(func(i int) (float64, error) {
		res, err := r.syncerDrainIn(ctx, "drain-syncer", n, "", "", nil)
		return res.rate, err
	}, func(i int) (float64, error) {
		res, err := r.syncerDrainIn(ctx, "drain-"+format, n, "", format, func(f *fake) []string {
			return []string{"--thirdparty-url", f.url + path, "--thirdparty-format", format}
		})
		return res.rate, err
	})
	if err != nil {
		return nil, err
	}
	ratio := rate / base
	return []Row{{
		Scenario: row,
		Measured: fmt.Sprintf("%s rows/s (%s rows, median of %d)", count(rate), count(float64(n)), r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("syncer format %s rows/s (median of %d)", count(base), r.sizes.DrainRepeats),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   fmt.Sprintf(">= %.2fx", target),
		Pass:     ratio >= target,
		Values:   map[string]float64{"rows": float64(n), "rows_per_s": rate, "syncer_rows_per_s": base, "ratio": ratio},
	}}, nil
}

func (r *runner) cloudEventsDrain(ctx context.Context) ([]Row, error) {
	return r.formatDrain(ctx, "cloudevents drain", "cloudevents", "/events", 0.8)
}

func (r *runner) elasticsearchDrain(ctx context.Context) ([]Row, error) {
	return r.formatDrain(ctx, "elasticsearch drain", "elasticsearch", "/orders", 0.8)
}

// hubspotYAML is the custom destination of the custom drain.
const hubspotYAML = `    format: custom
    request:
      path: /batch/upsert
      body: '{inputs: [.items[] | {id, version, properties: .payload}]}'
    deletes:
      path: /batch/archive
      body: '{inputs: [.items[] | {id, version}]}'
    response:
      accepted: '.status == 204 or .body.status == "COMPLETE"'
      rejected: '[.body.errors[]? | {id: .context.ids[0], error: .message}]'
`

func (r *runner) customDrain(ctx context.Context) ([]Row, error) {
	n := r.sourceSizes().drainRows
	base, rate, err := r.alternate(func(int) (float64, error) {
		run, err := r.runSources(ctx, "custom-base", []string{"orders"}, n, 0, 0)
		return float64(n) / run.took.Seconds(), err
	}, func(int) (float64, error) {
		run, err := r.runSourcesIn(ctx, "custom", []string{"orders"}, n, 0, 0,
			benchFormat{fake: "custom", path: "/crm/v3/objects/contacts", yaml: hubspotYAML})
		return float64(n) / run.took.Seconds(), err
	})
	if err != nil {
		return nil, err
	}
	ratio := rate / base
	return []Row{{
		Scenario: "custom drain",
		Measured: fmt.Sprintf("%s rows/s (%s rows of a source, jq body and rejected program, median of %d)", count(rate), count(float64(n)), r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("syncer format %s rows/s (same source, median of %d)", count(base), r.sizes.DrainRepeats),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.60x",
		Pass:     ratio >= 0.6,
		Values:   map[string]float64{"rows": float64(n), "rows_per_s": rate, "syncer_rows_per_s": base, "ratio": ratio},
	}}, nil
}

// receiver is a webhook receiver that answers at once: it reads the body,
// counts the request and the distinct webhook-ids, and answers 204.
type receiver struct {
	srv      *http.Server
	url      string
	requests atomic.Int64
	mu       sync.Mutex
	ids      map[string]bool
	first    time.Time
	last     time.Time
}

func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen for the receiver: %w", err)
	}
	rc := &receiver{url: "http://" + ln.Addr().String() + "/hooks", ids: map[string]bool{}}
	buf := sync.Pool{New: func() any { return make([]byte, 64<<10) }}
	rc.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := buf.Get().([]byte)
		for {
			if _, err := r.Body.Read(b); err != nil {
				break
			}
		}
		buf.Put(b)
		rc.requests.Add(1)
		now := time.Now()
		rc.mu.Lock()
		rc.ids[r.Header.Get("Webhook-Id")] = true
		if rc.first.IsZero() {
			rc.first = now
		}
		rc.last = now
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = rc.srv.Serve(ln) }()
	return rc, nil
}

func (rc *receiver) distinct() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.ids)
}

func (rc *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = rc.srv.Shutdown(ctx)
}

// plainWebhooksProcess runs PlainWebhooks in a process of its own
// (`syncer-lab bench-webhooks-client`), as the daemon it is compared with runs
// in its own: both then pay the same process boundary to the receiver,
// which lives in the bench's process, and the figure compares syncer with
// a plain client, not one process placement with another.
func (r *runner) plainWebhooksProcess(ctx context.Context, url string, n int) (webhooksRun, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.cfg.Lab, "bench-webhooks-client", "--url", url, "--rows", strconv.Itoa(n))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	self0, _ := procCPUSeconds("self")
	if err := cmd.Run(); err != nil {
		return webhooksRun{}, fmt.Errorf("bench: plain webhooks client: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	self1, _ := procCPUSeconds("self")
	var rate, cpu float64
	if _, err := fmt.Sscan(stdout.String(), &rate, &cpu); err != nil {
		return webhooksRun{}, fmt.Errorf("bench: plain webhooks client: %w", err)
	}
	return webhooksRun{rate: rate, sender: cpu / float64(n), receiver: (self1 - self0) / float64(n)}, nil
}

// cpuPerRequest is where the CPU of runs went, a request at a time, in µs:
// the medians of each party's, read from /proc (clock ticks of 10 ms, so
// rough at the tiny size).
func cpuPerRequest(runs []webhooksRun) (sender, database, receiver float64) {
	var s, d, r []float64
	for _, x := range runs {
		s, d, r = append(s, x.sender*1e6), append(d, x.database*1e6), append(r, x.receiver*1e6)
	}
	return median(s), median(d), median(r)
}

// webhooksRun is one run of the webhooks row: requests a second, and the
// CPU each party spent a request, in seconds (database: PostgreSQL, for
// syncer's runs).
type webhooksRun struct {
	rate                       float64
	sender, database, receiver float64
}

// webhookRows is the rows of the webhooks scenario.
func (r *runner) webhookRows() int {
	if r.cfg.Size == SizeTiny {
		return 1_000
	}
	return 20_000
}

const webhookInFlight = 16

// PlainWebhooks sends n signed requests like syncer's, 16 at once, with a
// plain Go client, and returns requests a second and the CPU seconds its
// process spent while sending. The requests are the ones syncer sends,
// byte for byte but for the signature's time: the same body, an
// Idempotency-Key and webhook-id of the same form, the same headers. A
// plain client has its messages and their ids ready: they are made before
// the clock starts.
func PlainWebhooks(ctx context.Context, url string, n int) (rate, cpu float64, err error) {
	key, err := standardwebhooks.ParseSecret(benchSecret)
	if err != nil {
		return 0, 0, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: webhookInFlight}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	at := time.Now().UTC().Truncate(time.Second).Format(time.RFC3339Nano)
	bodies := make([][]byte, n)
	ids := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"type":"resources.upserted","timestamp":%q,"data":{"id":"%d","version":1,"payload":%s}}`, at, i+1, payloadFor(int64(i+1)))
		ids[i] = thirdparty.RequestKey("bench", "plain", http.MethodPost, "", bodies[i])
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, webhookInFlight)
	cpu0, _ := procCPUSeconds("self")
	start := time.Now()
	for range webhookInFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				id := ids[i]
				ts := strconv.FormatInt(time.Now().Unix(), 10)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[i]))
				req.Header["Content-Type"] = []string{"application/json"}
				req.Header["Idempotency-Key"] = []string{id}
				req.Header["Webhook-Id"] = []string{id}
				req.Header["Webhook-Timestamp"] = []string{ts}
				req.Header["Webhook-Signature"] = []string{standardwebhooks.Signature(key, id, ts, bodies[i])}
				resp, err := client.Do(req)
				if err != nil {
					errc <- err
					return
				}
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	cpu1, _ := procCPUSeconds("self")
	close(errc)
	if err := <-errc; err != nil {
		return 0, 0, fmt.Errorf("bench: plain webhooks client: %w", err)
	}
	return float64(n) / took.Seconds(), cpu1 - cpu0, nil
}

// syncerWebhooks drains n rows as standard-webhooks requests to a fresh
// receiver and returns requests a second, from the first request to the
// last row marked, and the CPU each party spent meanwhile.
func (r *runner) syncerWebhooks(ctx context.Context, n int) (webhooksRun, error) {
	s, err := r.newScratch(ctx, "webhooks", false)
	if err != nil {
		return webhooksRun{}, err
	}
	defer s.drop(ctx)
	if err := s.preload(ctx, n); err != nil {
		return webhooksRun{}, err
	}
	rc, err := startReceiver()
	if err != nil {
		return webhooksRun{}, err
	}
	defer rc.close()
	// The fake is not used: the receiver is the third party.
	f := &fake{url: rc.url}
	r.progressf("   webhooks: daemon sending %s signed requests, %d in flight", count(float64(n)), webhookInFlight)
	d, err := r.startDaemon(ctx, s, f, false, "--thirdparty-format", "standard-webhooks",
		"--max-in-flight", strconv.Itoa(webhookInFlight), "SYNCER_THIRDPARTY_SIGNING_SECRET="+benchSecret)
	if err != nil {
		return webhooksRun{}, err
	}
	defer d.stop()
	wctx, cancel := context.WithTimeout(ctx, drainLimit(n))
	defer cancel()
	daemon0, _ := d.cpuSeconds()
	db0 := postgresCPUSeconds()
	self0, _ := procCPUSeconds("self")
	end, err := s.waitMarked(wctx, rc, n)
	if err != nil {
		return webhooksRun{}, fmt.Errorf("bench: webhooks: %w (the receiver saw %d of %d ids): %s", err, rc.distinct(), n, d.stderr.String())
	}
	daemon1, _ := d.cpuSeconds()
	db1 := postgresCPUSeconds()
	self1, _ := procCPUSeconds("self")
	rc.mu.Lock()
	first := rc.first
	rc.mu.Unlock()
	if extra := rc.requests.Load() - int64(n); extra > 0 {
		r.note("webhooks: the receiver got %d requests more than rows", extra)
	}
	run := webhooksRun{
		rate:     float64(n) / end.Sub(first).Seconds(),
		sender:   (daemon1 - daemon0) / float64(n),
		database: (db1 - db0) / float64(n),
		receiver: (self1 - self0) / float64(n),
	}
	return run, d.stop()
}

// waitMarked waits until the receiver holds n ids and the daemon has
// marked n rows, and returns when the marks were first seen. The marks'
// count is read from the checkpoint, which the transaction that marks a
// batch updates too: one row's lookup, so it is polled every millisecond
// (the last batch's marks take a few), where a scan for pending rows would
// take milliseconds itself and put the end late by as much. No row left
// pending is checked at the end.
func (s *scratch) waitMarked(ctx context.Context, rc *receiver, n int) (time.Time, error) {
	for rc.distinct() < n {
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("not drained: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	for {
		var done int64
		err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(rows_done), 0) FROM syncer_checkpoints WHERE name = $1`, checkpoint.Live).Scan(&done)
		if err != nil {
			return time.Time{}, err
		}
		if done >= int64(n) {
			break
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("not drained: %d of %d rows marked: %w", done, n, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	end := time.Now()
	// Were a batch counted twice, the count would run ahead of the marks:
	// then the end is when no row is left pending.
	for {
		pending, err := s.anyPending(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if !pending {
			return end, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("not drained: rows still pending: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
		end = time.Now()
	}
}

func (r *runner) webhooks(ctx context.Context) ([]Row, error) {
	n := r.webhookRows()
	var plain, daemon []webhooksRun
	base, rate, err := r.alternate(func(int) (float64, error) {
		rc, err := startReceiver()
		if err != nil {
			return 0, err
		}
		defer rc.close()
		r.progressf("   webhooks: plain Go client (its own process), %s signed requests, %d at once", count(float64(n)), webhookInFlight)
		run, err := r.plainWebhooksProcess(ctx, rc.url, n)
		plain = append(plain, run)
		return run.rate, err
	}, func(int) (float64, error) {
		run, err := r.syncerWebhooks(ctx, n)
		daemon = append(daemon, run)
		return run.rate, err
	})
	if err != nil {
		return nil, err
	}
	plainSender, _, plainReceiver := cpuPerRequest(plain)
	sender, database, receiver := cpuPerRequest(daemon)
	r.note("webhooks: CPU per request (medians, from /proc): plain client %.0f µs + its receiver %.0f µs = %.0f µs; daemon %.0f µs + PostgreSQL %.0f µs + its receiver %.0f µs = %.0f µs",
		plainSender, plainReceiver, plainSender+plainReceiver, sender, database, receiver, sender+database+receiver)
	ratio := rate / base
	return []Row{{
		Scenario: "webhooks",
		Measured: fmt.Sprintf("%s requests/s (%s rows, one signed request each, %d in flight, median of %d)", count(rate), count(float64(n)), webhookInFlight, r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("plain Go client %s requests/s (same requests, %d at once, its own process)", count(base), webhookInFlight),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.70x",
		Pass:     ratio >= 0.7,
		Values: map[string]float64{"rows": float64(n), "requests_per_s": rate, "plain_requests_per_s": base, "ratio": ratio,
			"plain_client_cpu_us": plainSender, "plain_receiver_cpu_us": plainReceiver,
			"daemon_cpu_us": sender, "postgres_cpu_us": database, "receiver_cpu_us": receiver},
	}}, nil
}
