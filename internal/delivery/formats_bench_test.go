package delivery_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// BenchmarkFormatsDeliver delivers batches of 500 in each format to the
// fake speaking it, one at a time: the cost of a format on both sides of
// the wire, beside the syncer format's.
//
//	go test -run '^$' -bench FormatsDeliver ./internal/delivery/
func BenchmarkFormatsDeliver(b *testing.B) {
	for _, tc := range formatCases {
		b.Run(tc.name, func(b *testing.B) {
			fake := fakethirdparty.New(fakethirdparty.Config{Format: tc.name, SigningSecret: testSecret})
			srv := httptest.NewServer(fake)
			b.Cleanup(srv.Close)
			benchDeliver(b, srv.URL+tc.path, &tc.spec)
		})
	}
}

// benchDeliver delivers batches of 500 items to url in the format spec
// names, 16 requests in flight, one batch at a time, and reports the time
// per request beside the time per batch.
func benchDeliver(b *testing.B, url string, spec *formats.Spec) {
	b.Helper()
	f, err := formats.New(spec, installation)
	if err != nil {
		b.Fatal(err)
	}
	client, err := thirdparty.New(&thirdparty.Config{URL: url, IdleConns: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	d, err := delivery.New(client, nil, &delivery.Config{Installation: installation, Format: f, MaxInFlight: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n, requests := 0, 0
	for b.Loop() {
		its := items(n*500, 500, nil)
		n++
		out, err := d.Deliver(context.Background(), delivery.Batch{Items: its, Salt: fmt.Sprint(n), Time: time.Unix(1, 0)})
		if err != nil || len(out.Accepted) != 500 {
			b.Fatalf("deliver: %v", err)
		}
		requests += out.Requests
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(requests, 1)), "ns/request")
}
