package thirdparty

import "net/http"

// NewAnswerForTest builds the Answer a Client would hand a format's reader
// for status, header and body, so formats can be tested without a server.
func NewAnswerForTest(status int, h http.Header, body []byte) *Answer {
	a := &Answer{StatusCode: status, Header: h, Body: body}
	if status < 200 || status > 299 {
		a.refusal = &Error{StatusCode: status, Body: SafeText(string(body))}
	}
	return a
}
