package delivery_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/formats"
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
			f, err := formats.New(&tc.spec, installation)
			if err != nil {
				b.Fatal(err)
			}
			client, err := thirdparty.New(&thirdparty.Config{URL: srv.URL + tc.path})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(client.Close)
			d, err := delivery.New(client, nil, &delivery.Config{Installation: installation, Format: f, MaxInFlight: 16})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				its := items(n*500, 500, nil)
				n++
				out, err := d.Deliver(context.Background(), delivery.Batch{Items: its, Salt: fmt.Sprint(n), Time: time.Unix(1, 0)})
				if err != nil || len(out.Accepted) != 500 {
					b.Fatalf("deliver: %v", err)
				}
			}
		})
	}
}
