package verify

import (
	"time"

	"github.com/syncer-dev/syncer/internal/formats/readback"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// NewClient returns a client of url with a bearer token (empty: none),
// for a destination the SYNCER_THIRDPARTY_* settings configure.
func NewClient(url, token string) (*thirdparty.Client, error) {
	return thirdparty.New(&thirdparty.Config{URL: url, Token: token, Timeout: LookupTimeoutDefault})
}

// LookupTimeoutDefault bounds one lookup, from sending to the whole
// answer: an answer of 500 documents is larger than a batch's.
const LookupTimeoutDefault = 30 * time.Second

// There is what the destination holds for one id, as a format's reader
// (package readback) says it.
type There = readback.There
