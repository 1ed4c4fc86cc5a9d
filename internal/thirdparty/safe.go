package thirdparty

import (
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/syncer-dev/syncer/internal/redact"
)

// SafeTextMax bounds the text SafeText returns, in bytes: enough to read a
// third party's explanation, not enough to flood a log line, `status` or a
// database column.
const SafeTextMax = 2 << 10

// safeTextCut marks text SafeText shortened.
const safeTextCut = "...[cut]"

const redacted = redact.Mark

// SafeText makes text that came from outside (a response body, a rejection
// reason, a header), trimmed of the white space around it, fit to be logged, stored or printed: invalid UTF-8 is
// replaced, every secret in every form a third party may echo it
// (redact.Forms: as is, URL-escaped, base64, inside a JSON string; pass
// the base64 of a Basic header as redact.Basic gives it) becomes [redacted],
// control characters, terminal escapes and Unicode line or direction
// controls are written as visible escapes (\n, \x1b, \u2028), so the text
// cannot forge a log line or drive a terminal, and the result is at most
// SafeTextMax bytes, ending in "...[cut]" when shortened.
//
// Secrets are removed before anything is cut, so a cut never leaves the
// start of a secret behind; callers that read a bounded excerpt read
// SafeTextMax plus a few times the secret's length for the same reason.
func SafeText(s string, secrets ...string) string {
	// An answer's text ends in a newline more often than not (http.Error,
	// most frameworks): trimmed, a reason never ends in a literal \n.
	return safeText(s, redact.Forms(secrets...))
}

// safeText is SafeText with the secrets' forms already expanded
// (redact.Forms), for a caller that makes many texts safe.
func safeText(s string, forms []string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
	s = redact.ScrubForms(s, forms)
	var b strings.Builder
	b.Grow(min(len(s), SafeTextMax))
	cutAt := -1 // where the text ends if the marker must follow
	for _, r := range s {
		var piece string
		switch {
		case r == '\n':
			piece = `\n`
		case r == '\r':
			piece = `\r`
		case r == '\t':
			piece = `\t`
		case r < 0x20 || (r >= 0x7f && r < 0xa0):
			// C0 and C1 controls: ESC starts terminal sequences, and C1
			// holds their 8-bit forms (CSI is \x9b).
			piece = `\x` + hex2(byte(r))
		case isInvisibleControl(r):
			piece = `\u` + strconv.FormatInt(int64(r), 16)
		default:
			piece = string(r)
		}
		if cutAt < 0 && b.Len()+len(piece) > SafeTextMax-len(safeTextCut) {
			cutAt = b.Len()
		}
		if b.Len()+len(piece) > SafeTextMax {
			return b.String()[:cutAt] + safeTextCut
		}
		b.WriteString(piece)
	}
	return b.String()
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

// isInvisibleControl reports the characters that change how a line reads
// without being seen: line and paragraph separators (some log viewers break
// lines there) and the bidirectional overrides and isolates ("Trojan
// Source"). Other format characters, such as the zero-width joiner of
// emoji, are left alone.
func isInvisibleControl(r rune) bool {
	switch {
	case r == 0x2028 || r == 0x2029:
		return true
	case r >= 0x202a && r <= 0x202e:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200e || r == 0x200f || r == 0x061c:
		return true
	}
	return false
}

// RedactURL returns raw without what may hold a secret: userinfo, query and
// fragment are removed, scheme, host and path kept, and "?[redacted]"
// stands where a query was, so a log still shows that one was configured.
// Text that does not parse as a URL is replaced whole.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[unparseable URL]"
	}
	if u.Opaque != "" {
		// "mailto:x" or "host:port/path" read as an opaque URL: nothing in
		// it can be told apart from a secret.
		return u.Scheme + ":" + redacted
	}
	hadQuery := u.RawQuery != "" || u.ForceQuery
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	s := u.String()
	if hadQuery {
		s += "?" + redacted
	}
	return s
}

// redactURLError rewrites the URL of every *url.Error in err's chain (the
// form net/http gives transport errors, whose text holds the whole URL,
// query string included) to its redacted form. The chain is otherwise kept,
// so errors.Is and errors.As work as before.
func redactURLError(err error) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ue, ok := e.(*url.Error); ok {
			ue.URL = RedactURL(ue.URL)
		}
	}
}
