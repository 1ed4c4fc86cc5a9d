// Package syncer is the destination format of syncer's own protocol
// (docs/protocol.md section 2): one request per batch, POST {url}/v1/batches,
// the canonical body of [thirdparty.AppendBatch], and an answer read as
// the contract's results. It is the default format, and the one whose
// request body is the recorded body itself.
package syncer

import (
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Format is the syncer format. The zero value is ready to use.
type Format struct{}

// Name is the format's name in configuration.
const Name = "syncer"

// Requests makes one request of the whole batch.
func (Format) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	return []thirdparty.Request{Request(b.Items, thirdparty.AppendBatch(nil, b.Items))}, nil
}

// Request is the request of items whose canonical body is body.
func Request(items []thirdparty.Item, body []byte) thirdparty.Request {
	ids := make([]string, len(items))
	for i := range items {
		ids[i] = items[i].ID
	}
	return thirdparty.Request{Path: thirdparty.BatchPath, ContentType: "application/json", Body: body, IDs: ids, Items: items}
}

// Read reads the answer as the contract's results.
func (Format) Read(r *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error) {
	return a.Results(r.IDs)
}

// CanonicalRequest is the request of items whose canonical body (the
// recorded one) is body: the delivery path's optional Canonical
// capability, so a recorded batch is sent as recorded, without encoding it
// again.
func (Format) CanonicalRequest(items []thirdparty.Item, body []byte) thirdparty.Request {
	return Request(items, body)
}
