// Package redact finds secrets in text a third party sent back and
// replaces them with [redacted]. A third party quotes what it was sent in
// whatever form it was sent or stored: the secret as is, URL-encoded (a
// form body, a query string, a path), inside a JSON string, or inside an
// HTTP Basic header as the base64 of "id:secret". Forms expands a secret
// into every one of those forms, once, in this one place; Scrub removes
// them all, longest first, so that no form leaves a piece of a longer one
// behind (the unpadded base64 inside the padded one).
package redact

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Mark is what stands where a secret was.
const Mark = "[redacted]"

// derivedMin is the shortest derived form (base64, escaped) scrubbed: a
// shorter one would be found in ordinary words and garble the text, and
// comes only from a secret too short to be one.
const derivedMin = 4

var encodings = []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding}

// Basic returns the texts an HTTP Basic header (RFC 7617) of id and secret
// carries the secret in: the base64 of "id:secret", in the standard and
// URL alphabets, with and without padding, and the same of the two
// URL-encoded first, as OAuth2 clients send a client's id and secret
// (RFC 6749 section 2.3.1, golang.org/x/oauth2 among them). Each is a
// secret of its own: pass them to Forms or Scrub with the secret. None
// when secret is empty.
func Basic(id, secret string) []string {
	if secret == "" {
		return nil
	}
	var out []string
	for _, pair := range []string{id + ":" + secret, url.QueryEscape(id) + ":" + url.QueryEscape(secret)} {
		for _, enc := range encodings {
			out = appendNew(out, enc.EncodeToString([]byte(pair)))
		}
	}
	return out
}

// Forms returns every form of secrets a third party may echo back: each
// secret as is and as the base64 of it alone (standard and URL alphabets,
// padded or not), each of those as is, query-escaped and path-escaped,
// and each of those as is and escaped inside a JSON string (as Go writes
// it, with or without its HTML escapes, with every rune past ASCII as
// \uXXXX, and with "/" as `\/` too, as Python and PHP encoders write
// it). A secret that is itself a Basic header's text (Basic) is not
// encoded again. The result has no duplicates and no empty form, longest
// first: the order Scrub needs. Empty secrets are skipped.
func Forms(secrets ...string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(f string) {
		if f != "" && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, s := range secrets {
		if s == "" || seen[s] {
			continue
		}
		encoded := []string{s}
		if !isBasicText(s) {
			for _, enc := range encodings {
				encoded = append(encoded, enc.EncodeToString([]byte(s)))
			}
		}
		for _, e := range encoded {
			for _, esc := range []string{e, url.QueryEscape(e), url.PathEscape(e)} {
				goJSON := jsonEscape(esc, false)
				for _, f := range []string{esc, jsonEscape(esc, true), goJSON, asciiJSON(goJSON)} {
					if f != s && len(f) < derivedMin {
						continue
					}
					add(f)
					if strings.Contains(f, "/") {
						add(strings.ReplaceAll(f, "/", `\/`))
					}
				}
			}
		}
	}
	sortLongestFirst(out)
	return out
}

// isBasicText reports whether s is the base64 of "id:secret", as Basic
// gives it: its base64 would be noise, never echoed.
func isBasicText(s string) bool {
	for _, enc := range encodings {
		if b, err := enc.DecodeString(s); err == nil {
			return strings.Contains(string(b), ":")
		}
	}
	return false
}

// Scrub returns text with every form of secrets (Forms) replaced by Mark.
func Scrub(text string, secrets ...string) string {
	if text == "" || len(secrets) == 0 {
		return text
	}
	return ScrubForms(text, Forms(secrets...))
}

// ScrubForms returns text with each of forms replaced by Mark, the longer
// forms first whatever their order in forms.
func ScrubForms(text string, forms []string) string {
	if text == "" || len(forms) == 0 {
		return text
	}
	if !slices.IsSortedFunc(forms, longestFirst) {
		forms = slices.Clone(forms)
		sortLongestFirst(forms)
	}
	for _, f := range forms {
		if f != "" && strings.Contains(text, f) {
			text = strings.ReplaceAll(text, f, Mark)
		}
	}
	return text
}

// JSON returns the JSON value raw with every string in it, keys
// included, passed through scrub (Scrub with the secrets at hand). raw is
// returned as it is when scrub finds nothing in its text and it holds no
// escape that could hide a secret; otherwise it is decoded, scrubbed and
// encoded again (its objects' keys then in sorted order). Text that is not
// JSON comes back as a JSON string of its scrubbed text.
func JSON(raw []byte, scrub func(string) string) []byte {
	text := string(raw)
	if scrub(text) == text && !strings.Contains(text, `\`) {
		return raw
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		b, _ := json.Marshal(scrub(text))
		return b
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(scrubValue(v, scrub)); err != nil {
		out, _ := json.Marshal(scrub(text))
		return out
	}
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}

func scrubValue(v any, scrub func(string) string) any {
	switch t := v.(type) {
	case string:
		return scrub(t)
	case []any:
		for i := range t {
			t[i] = scrubValue(t[i], scrub)
		}
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[scrub(k)] = scrubValue(e, scrub)
		}
		return out
	}
	return v
}

// jsonEscape is s as it stands between the quotes of a JSON string:
// html also escapes <, > and & as \u003c (Go's default).
func jsonEscape(s string, html bool) string {
	if !needsJSONEscape(s, html) {
		return s
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	if enc.Encode(s) != nil {
		return s
	}
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// needsJSONEscape reports whether a JSON encoder changes s.
func needsJSONEscape(s string, html bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20, c == '"', c == '\\', c >= utf8.RuneSelf:
			return true
		case html && (c == '<' || c == '>' || c == '&'):
			return true
		}
	}
	return false
}

// asciiJSON is a JSON string's inside with every rune past ASCII written
// \uXXXX (a surrogate pair past the BMP), as Python's json.dumps and PHP's
// json_encode write it.
func asciiJSON(s string) string {
	ascii := true
	for i := 0; i < len(s) && ascii; i++ {
		ascii = s[i] < utf8.RuneSelf
	}
	if ascii {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func appendNew(out []string, s string) []string {
	if s == "" || slices.Contains(out, s) {
		return out
	}
	return append(out, s)
}

func longestFirst(a, b string) int {
	return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
}

func sortLongestFirst(forms []string) { slices.SortFunc(forms, longestFirst) }
