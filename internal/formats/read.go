package formats

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/readback"
)

// A destination is read back (`syncer verify`, docs/protocol.md "Verify
// and heal") through its verify block when it has one, whatever its
// format, else through its format's own read API (Kind.ReadBack). The
// block's programs are the custom format's language, so its settings are
// the custom package's; every caller holds them as readback.Settings.

// VerifyField is the destination field of a verify block.
const VerifyField = custom.VerifyField

// ReadSettings are a destination's verify settings (readback.Settings).
type ReadSettings = readback.Settings

// Account is what a reader reads with and for whom (readback.Account).
type Account = readback.Account

// ErrNoReadAPI is Reader's error, wrapped, for a format without a read
// API on a destination without a verify block.
var ErrNoReadAPI = readback.ErrNoReadAPI

// ParseVerify reads a destination's verify block, or nil when it has
// none, and compiles it to refuse what cannot work now. s are the
// destination's format settings: a custom destination's program_timeout
// bounds the block's programs too. The settings it returns compare as
// values.
func ParseVerify(f Fields, s Settings) (ReadSettings, error) {
	block, err := custom.ParseVerify(f, s)
	if err != nil || block == nil {
		return nil, err
	}
	return block, nil
}

// Reader returns the reader of account a of a destination of format name
// (r's; "" is the default) whose verify block is block (nil: none):
// through the block when there is one, else through the format's read
// API. A format without one, and no block, is an error wrapping
// ErrNoReadAPI; a block that does not compile (the file changed since it
// was checked) a *FieldError.
func (r *Registry) Reader(name string, block ReadSettings, a *Account) (readback.Reader, error) {
	if block != nil {
		rd, err := block.Reader(a)
		if err != nil {
			return nil, verifyFieldError(err)
		}
		return rd, nil
	}
	k, ok := r.Lookup(name)
	if !ok || k.ReadBack == nil {
		return nil, fmt.Errorf("format %s %w: verify cannot read it back without a verify block", cmp.Or(name, r.kinds[0].Name), ErrNoReadAPI)
	}
	return k.ReadBack.Reader(a)
}

// Reader is Default().Reader.
func Reader(name string, block ReadSettings, a *Account) (readback.Reader, error) {
	return Default().Reader(name, block, a)
}

// verifyFieldError is an error of a verify block as a *FieldError naming
// the field it starts with ("verify.response: ..."), its text unchanged.
func verifyFieldError(err error) error {
	field, _, ok := strings.Cut(err.Error(), ":")
	if !ok || !strings.HasPrefix(field, VerifyField) || strings.Contains(field, " ") {
		field = VerifyField
	}
	return &FieldError{Field: field, Err: err}
}
