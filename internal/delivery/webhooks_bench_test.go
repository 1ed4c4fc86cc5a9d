package delivery_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// BenchmarkWebhooksDeliver delivers batches of 500 items as signed
// standard-webhooks requests, 16 in flight, to a receiver that only reads
// and answers 204: the cost of a request on syncer's side of the wire
// (the receiver's is the same for any client), as the bench's webhooks
// row measures it end to end.
//
//	go test -run '^$' -bench WebhooksDeliver -benchmem ./internal/delivery/
func BenchmarkWebhooksDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	f, err := formats.New(&formats.Spec{Name: "standard-webhooks", SigningSecret: testSecret}, installation)
	if err != nil {
		b.Fatal(err)
	}
	client, err := thirdparty.New(&thirdparty.Config{URL: srv.URL + "/hooks", IdleConns: 16})
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
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*500), "ns/request")
}
