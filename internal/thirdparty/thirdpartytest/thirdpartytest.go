// Package thirdpartytest is test support for the packages that read the
// third party's answers (the formats): it builds the values a Client would
// hand them, without a server. Only tests import it.
package thirdpartytest

import (
	"net/http"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Answer is the Answer a Client would hand a format's reader for status,
// header and body; a status other than 2xx reads as the common rules'
// refusal (Answer.Refusal).
func Answer(status int, h http.Header, body []byte) *thirdparty.Answer {
	return &thirdparty.Answer{StatusCode: status, Header: h, Body: body}
}
