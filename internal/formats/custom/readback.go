package custom

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/syncer-dev/syncer/internal/formats/readback"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Reader returns the reader of a's account through the block: bound to
// a's tenant (its programs see $tenant, its path {tenant}) when a names
// one, as Format.ForTenant binds the deliverer's.
func (c *VerifyConfig) Reader(a *readback.Account) (readback.Reader, error) {
	v, err := NewVerify(c)
	if err != nil {
		return nil, err
	}
	if a.Tenant != "" {
		v = v.ForTenant(a.Tenant, a.Columns)
	}
	return &Reader{Client: a.Client, Verify: v, Source: a.Source}, nil
}

var _ readback.Settings = (*VerifyConfig)(nil)

// Reader reads a destination through its verify block (Verify): the
// block's request program makes one lookup of a page's items as they
// would be sent, its response program says what the answer holds, and its
// compare program, when given, says whether each payload held agrees with
// the item here. It reads any format's destination: standard-webhooks and
// cloudevents have no read API without one.
type Reader struct {
	// Client sends the requests to the destination's URL, with its
	// credentials, headers and TLS. Required.
	Client readback.Sender
	// Verify is the compiled verify block. Required.
	Verify *Verify
	// Source is the source's name, the programs' "source".
	Source string
	// Tries says how a transient failure is tried again.
	readback.Tries
}

var _ readback.Reader = (*Reader)(nil)

// Lookup asks for ids alone: the items carry no payload.
func (r *Reader) Lookup(ctx context.Context, ids []string) (map[string]readback.There, error) {
	items := make([]thirdparty.Item, len(ids))
	for i, id := range ids {
		items[i] = thirdparty.Item{ID: id}
	}
	return r.LookupItems(ctx, items)
}

// LookupItems asks for items, as they would be sent (Version: the one
// last accepted, 0 when not known), in one request. verify asks it in
// place of Lookup.
func (r *Reader) LookupItems(ctx context.Context, items []thirdparty.Item) (map[string]readback.There, error) {
	req, err := r.Verify.Request(r.Source, items)
	if err != nil {
		return nil, err
	}
	a, err := r.Send(ctx, r.Client, req)
	if err != nil {
		return nil, err
	}
	held, err := r.Verify.Answer(a.Status, a.Header, a.Body, req.IDs)
	if err != nil {
		// gojq's errors quote the values they fail on: the answer's text,
		// which may echo a credential.
		return nil, errors.New(withoutPreview(a.Safe(err.Error())))
	}
	out := make(map[string]readback.There, len(held))
	for i := range items {
		it := &items[i]
		h, ok := held[it.ID]
		if !ok {
			continue
		}
		t := readback.There{Payload: h.Payload, Deleted: h.Deleted, Unknown: h.Unknown}
		if r.Verify.Compares() && !it.Deleted && h.Payload != nil {
			agree, err := r.Verify.Agree(it, h.Payload)
			if err != nil {
				return nil, fmt.Errorf("id %s: %s", it.ID, withoutPreview(a.Safe(err.Error())))
			}
			t.Compared, t.Agrees = true, agree
		}
		out[it.ID] = t
	}
	return out, nil
}

// MaxIDs is the most ids the block's read API takes in one lookup (its
// lookup_size); 0 for no bound. verify asks for no more.
func (r *Reader) MaxIDs() int { return r.Verify.LookupSize() }

// Scrubber removes the destination's secrets from a text (an example of
// what it holds); nil when its client knows none.
func (r *Reader) Scrubber() func(string) string { return readback.ScrubberOf(r.Client) }

// preview is the value gojq quotes at the end of an error ("cannot iterate
// over: string (\"refused: Author ...\")"): cut short, so a credential
// echoed by the third party would show as a prefix no redaction finds.
var preview = regexp.MustCompile(`\b(string|number|object|array|boolean|null) \(.*$`)

// withoutPreview drops gojq's preview of a value from an error's text,
// keeping its type.
func withoutPreview(msg string) string {
	return preview.ReplaceAllString(msg, "$1")
}
