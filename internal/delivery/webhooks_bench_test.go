package delivery_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
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
	benchDeliver(b, srv.URL+"/hooks", &formats.Spec{Name: "standard-webhooks", Settings: standardwebhooks.Settings{SigningSecret: formats.Secret{Value: testSecret}}})
}
