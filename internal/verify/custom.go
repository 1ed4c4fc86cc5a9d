package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// CustomReader reads a destination through its verify block
// (custom.Verify): the block's request program makes one lookup of a
// page's items as they would be sent, its response program says what the
// answer holds, and its compare program, when given, says whether each
// payload held agrees with the item here. It reads any format's
// destination: standard-webhooks and cloudevents have no read API
// without one.
type CustomReader struct {
	// Client sends the requests to the destination's URL, with its
	// credentials, headers and TLS. Required.
	Client Sender
	// Verify is the compiled verify block. Required.
	Verify *custom.Verify
	// Source is the source's name, the programs' "source".
	Source string
	// Retries is how often a transient failure is tried again. Defaults to
	// LookupRetriesDefault.
	Retries int
	// Sleep waits between tries. Defaults to a context-aware sleep.
	Sleep func(ctx context.Context, d time.Duration) error
}

var (
	_ Reader     = (*CustomReader)(nil)
	_ ItemReader = (*CustomReader)(nil)
)

// Lookup asks for ids alone: the items carry no payload.
func (r *CustomReader) Lookup(ctx context.Context, ids []string) (map[string]There, error) {
	keys := make([]*Here, len(ids))
	for i, id := range ids {
		keys[i] = &Here{ID: id}
	}
	return r.LookupItems(ctx, keys)
}

// LookupItems asks for keys in one request.
func (r *CustomReader) LookupItems(ctx context.Context, keys []*Here) (map[string]There, error) {
	items := make([]thirdparty.Item, len(keys))
	for i, h := range keys {
		items[i] = thirdparty.Item{ID: h.ID, Version: h.Accepted, Payload: h.Payload, Deleted: h.Gone}
	}
	req, err := r.Verify.Request(r.Source, items)
	if err != nil {
		return nil, err
	}
	a, err := send(ctx, r.Client, req, cmp.Or(r.Retries, LookupRetriesDefault), r.Sleep)
	if err != nil {
		return nil, err
	}
	held, err := r.Verify.Answer(a.status, a.header, a.body, req.IDs)
	if err != nil {
		// gojq's errors quote the values they fail on: the answer's text,
		// which may echo a credential.
		return nil, errors.New(withoutPreview(a.safe(err.Error())))
	}
	out := make(map[string]There, len(held))
	for i := range items {
		it := &items[i]
		h, ok := held[it.ID]
		if !ok {
			continue
		}
		t := There{Payload: h.Payload, Deleted: h.Deleted, Unknown: h.Unknown}
		if r.Verify.Compares() && !it.Deleted && h.Payload != nil {
			agree, err := r.Verify.Agree(it, h.Payload)
			if err != nil {
				return nil, fmt.Errorf("id %s: %s", it.ID, withoutPreview(a.safe(err.Error())))
			}
			t.Compared, t.Agrees = true, agree
		}
		out[it.ID] = t
	}
	return out, nil
}

// MaxIDs is the most ids the block's read API takes in one lookup (its
// lookup_size); 0 for no bound. Run asks for no more.
func (r *CustomReader) MaxIDs() int { return r.Verify.LookupSize() }

// preview is the value gojq quotes at the end of an error ("cannot iterate
// over: string (\"refused: Author ...\")"): cut short, so a credential
// echoed by the third party would show as a prefix no redaction finds.
var preview = regexp.MustCompile(`\b(string|number|object|array|boolean|null) \(.*$`)

// withoutPreview drops gojq's preview of a value from an error's text,
// keeping its type.
func withoutPreview(msg string) string {
	return preview.ReplaceAllString(msg, "$1")
}
