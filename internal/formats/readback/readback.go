// Package readback is the seam a format's read API plugs into, beside its
// sender (package setting): a format that can be read back declares its
// verify settings (a setting.Kind's ReadBack), and those settings build
// its Reader for one account. `syncer verify` and the daemons' background
// runs ask the registry (formats.Registry.Reader) for a destination's
// reader and never name a format.
//
// What it guarantees: every reader sends through the destination's own
// client (Sender), so a lookup carries the export's credentials, headers
// and TLS, and every text of an error is already stripped of its secrets;
// a lookup answered 429, 5xx or not at all is tried again (Tries), one
// that is refused is not.
package readback

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Sender sends one request to a destination: a *thirdparty.Client, the
// client the daemons send with, so a lookup carries the destination's own
// credentials (a bearer token, basic auth, an OAuth2 token renewed after a
// 401), its headers and its TLS, follows no redirect, and every text of an
// error is already stripped of those secrets.
type Sender interface {
	Send(ctx context.Context, key string, r *thirdparty.Request, read func(*thirdparty.Answer) (*thirdparty.Result, error)) (*thirdparty.Result, error)
}

var _ Sender = (*thirdparty.Client)(nil)

// There is what the destination holds for one id.
type There struct {
	Version int64
	Payload json.RawMessage
	// Deleted is set when the destination says it holds the id deleted.
	Deleted bool
	// Unknown is set when the answer named the id but did not say what it
	// holds (an error for that id).
	Unknown bool
	// Compared is set when the reader compared the payload itself (a
	// verify block's compare program), Agrees with its verdict; otherwise
	// the payloads are compared as JSON values.
	Compared, Agrees bool
}

// Reader asks a destination what it holds.
type Reader interface {
	// Lookup returns what the destination holds for ids; an id left out of
	// the map is absent there.
	Lookup(ctx context.Context, ids []string) (map[string]There, error)
}

// Account is what a reader reads with and for whom.
type Account struct {
	// Client sends the requests to the destination's URL (the tenant's
	// account's, for a tenant), with its credentials, headers and TLS.
	// Required.
	Client Sender
	// Source is the source's name (a verify block's "source").
	Source string
	// Tenant is the tenant whose account Client reads. Defaults to "":
	// the destination's one account.
	Tenant string
	// Columns are the extra columns of the tenant's connection row (a
	// verify block's $tenant). Defaults to nil.
	Columns map[string]any
}

// Settings are a destination's verify settings, of the type the format
// (or the verify block) that reads them declares: they build its reader.
type Settings interface {
	// Reader returns the reader of a's account.
	Reader(a *Account) (Reader, error)
}

// ErrNoReadAPI is the registry's error for a format the contract gives no
// read API, on a destination without a verify block.
var ErrNoReadAPI = errors.New("has no read API")

// scrubber is a Sender that knows its destination's secrets (a
// *thirdparty.Client): Scrub removes every form of them from a text.
type scrubber interface{ Scrub(string) string }

// ScrubberOf is what removes the secrets c knows of from a text (an
// example of what the destination holds, which may echo them); nil when c
// knows none.
func ScrubberOf(c Sender) func(string) string {
	if sc, ok := c.(scrubber); ok {
		return sc.Scrub
	}
	return nil
}
