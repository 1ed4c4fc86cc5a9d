package readback

import "context"

// IDs are the verify settings of a read API that takes {"ids": [...]}
// posted to Path and answers what it holds of them in a body of its own
// shape, which Answer reads: the syncer format's /v1/lookup,
// Elasticsearch's _mget.
type IDs struct {
	// Path is appended to the destination's URL. Required.
	Path string
	// Answer reads a 2xx answer's body into what is held, by id; an id
	// left out is absent there. Required.
	Answer func(body []byte) (map[string]There, error)
}

// Reader returns the reader of a's account.
func (s IDs) Reader(a *Account) (Reader, error) { return &IDsReader{Client: a.Client, IDs: s}, nil }

// IDsReader reads a destination through an IDs read API.
type IDsReader struct {
	// Client sends the requests to the destination's URL, with its
	// credentials, headers and TLS. Required.
	Client Sender
	// IDs are the read API's path and how its answer reads.
	IDs
	// Tries says how a transient failure is tried again.
	Tries
}

var (
	_ Settings = IDs{}
	_ Reader   = (*IDsReader)(nil)
)

// Lookup asks for ids in one request.
func (r *IDsReader) Lookup(ctx context.Context, ids []string) (map[string]There, error) {
	raw, err := r.PostIDs(ctx, r.Client, r.Path, ids)
	if err != nil {
		return nil, err
	}
	return r.Answer(raw)
}

// Scrubber removes the destination's secrets from a text (an example of
// what it holds); nil when its client knows none.
func (r *IDsReader) Scrubber() func(string) string { return ScrubberOf(r.Client) }
