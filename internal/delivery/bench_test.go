package delivery_test

import (
	"context"
	syncerformat "github.com/syncer-dev/syncer/internal/formats/syncer"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// The rows of issue 9's bench that the delivery package alone decides:
//
//	go test -run '^$' -bench 'UnannouncedLimit|AdvertisedQuota' -benchtime 1x ./internal/delivery/
//
// Each prints its figures with b.ReportMetric, beside its target.

// pushFor pushes batches of size items from pushers goroutines until stop
// returns true or ctx ends.
func pushFor(ctx context.Context, b *testing.B, d *delivery.Deliverer, pushers, size int, stop func() bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range pushers {
		wg.Go(func() {
			for ctx.Err() == nil && !stop() {
				k := int(next.Add(1))
				if _, err := d.Deliver(ctx, batch("", items(k*size, size, nil))); err != nil && ctx.Err() == nil {
					b.Errorf("deliver: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func benchFake(b *testing.B, cfg fakethirdparty.Config) (*fakethirdparty.Server, *thirdparty.Client) {
	fake := fakethirdparty.New(cfg)
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	client, err := thirdparty.New(&thirdparty.Config{URL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	return fake, client
}

// BenchmarkUnannouncedLimit: the third party allows 20 requests/s and says
// so only with bare 429s; no limit configured; batch 20; 4 in flight.
// Target from 15 s on: >= 17 accepted requests/s, <= 5% answered 429.
func BenchmarkUnannouncedLimit(b *testing.B) {
	const (
		limit = 20
		run   = 40 * time.Second
		from  = 15 * time.Second
	)
	for b.Loop() {
		fake, client := benchFake(b, fakethirdparty.Config{UnannouncedLimit: limit})
		d, err := delivery.New(client, nil, &delivery.Config{Installation: installation, Format: syncerformat.Format{}, MaxInFlight: 4})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(b.Context(), run)
		pushFor(ctx, b, d, 4, 20, func() bool { return false })
		cancel()

		reqs := fake.Requests()
		start := reqs[0].At
		var ok, limited, total int
		var last time.Time
		for _, r := range reqs {
			if r.At.Sub(start) < from {
				continue
			}
			total++
			switch r.Status {
			case 200:
				ok++
			case 429:
				limited++
			}
			last = r.At
		}
		secs := last.Sub(start.Add(from)).Seconds()
		b.ReportMetric(float64(ok)/secs, "accepted_req/s")
		b.ReportMetric(100*float64(limited)/float64(total), "%_429")
		b.ReportMetric(float64(fake.Stats().RequestsByStatus["429"]), "429s_total")
	}
}

// BenchmarkAdvertisedQuota: the third party advertises 30 requests per 3 s
// in RateLimit-* headers; no limit configured; 4 in flight. Target: <= 2
// requests over an exhausted quota in the whole run, done within 1.35 x
// the quota's time.
func BenchmarkAdvertisedQuota(b *testing.B) {
	const (
		quota    = 30
		window   = 3 * time.Second
		requests = 300
	)
	for b.Loop() {
		fake, client := benchFake(b, fakethirdparty.Config{Quota: quota, QuotaWindow: window})
		d, err := delivery.New(client, nil, &delivery.Config{Installation: installation, Format: syncerformat.Format{}, MaxInFlight: 4})
		if err != nil {
			b.Fatal(err)
		}
		var sent atomic.Int64
		start := time.Now()
		pushFor(b.Context(), b, d, 4, 20, func() bool { return sent.Add(1) > requests })
		took := time.Since(start)
		ideal := time.Duration(requests/quota) * window
		st := fake.Stats()
		b.ReportMetric(float64(st.OverQuota), "over_quota")
		b.ReportMetric(took.Seconds()/ideal.Seconds(), "x_quota_time")
		b.ReportMetric(float64(st.RequestsByStatus["200"]), "accepted")
	}
}
