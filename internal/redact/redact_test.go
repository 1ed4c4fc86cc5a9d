package redact_test

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/redact"
)

// every is what a third party may echo of id and secret: the secret in
// every encoding, and the Basic header's base64 as Go's http client and
// golang.org/x/oauth2 send it.
func every(id, secret string) map[string]string {
	out := map[string]string{
		"as is":        secret,
		"query-escape": url.QueryEscape(secret),
		"path-escape":  url.PathEscape(secret),
	}
	for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "raw std": base64.RawStdEncoding, "url": base64.URLEncoding, "raw url": base64.RawURLEncoding} {
		out["base64 "+name+" of id:secret"] = enc.EncodeToString([]byte(id + ":" + secret))
		out["base64 "+name+" of the escaped id:secret (oauth2)"] = enc.EncodeToString([]byte(url.QueryEscape(id) + ":" + url.QueryEscape(secret)))
		out["base64 "+name+" of the secret"] = enc.EncodeToString([]byte(secret))
	}
	std := base64.StdEncoding.EncodeToString([]byte(id + ":" + secret))
	out["query-escaped base64 of id:secret"] = url.QueryEscape(std)
	b, _ := json.Marshal(secret)
	out["inside a JSON string"] = string(b[1 : len(b)-1])
	out["base64 with escaped slashes"] = strings.ReplaceAll(std, "/", `\/`)
	out["JSON past ASCII escaped (Python, PHP)"] = strings.NewReplacer("é", `\u00e9`, "𝄞", `\ud834\udd1e`, `"`, `\"`, `\`, `\\`, "/", `\/`).Replace(secret)
	return out
}

func TestScrubEveryForm(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, id, secret string }{
		{"plain", "ccid", "SECRET-0123456789"},
		{"url and base64 specials", "client id/é", `s3cr3t/+=&?"é~ x\>`},
		{"past the BMP", "id", "clef𝄞/é-secret"},
		{"a secret whose base64 has slashes and pluses", "id", "??>>~~??>>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := append([]string{tt.secret}, redact.Basic(tt.id, tt.secret)...)
			for form, v := range every(tt.id, tt.secret) {
				text := "you sent Authorization: Basic " + v + "; and " + v + "."
				got := redact.Scrub(text, secrets...)
				require.Equal(t, "you sent Authorization: Basic [redacted]; and [redacted].", got, "form %s (%q)", form, v)
			}
		})
	}
}

func TestScrubLongestFormFirst(t *testing.T) {
	t.Parallel()
	// The padded base64 holds the unpadded one: replaced whole, no "=="
	// left behind, whatever order the forms come in.
	padded := base64.StdEncoding.EncodeToString([]byte("id:ab"))
	require.True(t, strings.HasSuffix(padded, "="))
	forms := redact.Forms(redact.Basic("id", "ab")...)
	for i := 0; i+1 < len(forms); i++ {
		require.GreaterOrEqual(t, len(forms[i]), len(forms[i+1]), "longest first")
	}
	reversed := make([]string, len(forms))
	for i, f := range forms {
		reversed[len(forms)-1-i] = f
	}
	require.Equal(t, "x [redacted] y", redact.ScrubForms("x "+padded+" y", reversed))
}

func TestScrubLeavesOtherTextAlone(t *testing.T) {
	t.Parallel()
	text := "invalid_client: the client is unknown (id ccid)"
	require.Equal(t, text, redact.Scrub(text, "SECRET-0123456789"))
	require.Equal(t, text, redact.Scrub(text, ""))
	require.Equal(t, text, redact.Scrub(text))
	// A secret too short to be one has no derived forms: "ab" is base64
	// "YWI", which ordinary text holds.
	require.NotContains(t, redact.Forms("ab"), "YWI")
	require.Empty(t, redact.Basic("id", ""))
	// A Basic header's text is not encoded again: its base64 is noise.
	header := redact.Basic("id", "secret")[0]
	require.NotContains(t, redact.Forms(header), base64.StdEncoding.EncodeToString([]byte(header)))
	require.Contains(t, redact.Forms("secret"), base64.StdEncoding.EncodeToString([]byte("secret")))
}

func TestJSON(t *testing.T) {
	t.Parallel()
	secret := "tok/sec+ret=1"
	basic := base64.StdEncoding.EncodeToString([]byte("user:" + secret))
	scrub := func(s string) string {
		return redact.Scrub(s, append([]string{secret}, redact.Basic("user", secret)...)...)
	}
	for _, tt := range []struct{ name, in, want string }{
		{"nothing to scrub comes back as it was", `{"b": 1, "a": "x"}`, `{"b": 1, "a": "x"}`},
		{"a value", `{"name":"a","seen":"Basic ` + basic + `"}`, `{"name":"a","seen":"Basic [redacted]"}`},
		{"escaped slashes", `{"seen":"Basic ` + strings.ReplaceAll(basic, "/", `\/`) + `"}`, `{"seen":"Basic [redacted]"}`},
		{"unicode escapes", `{"seen":"` + strings.ReplaceAll(secret, "+", `\u002b`) + `"}`, `{"seen":"[redacted]"}`},
		{"a key and an array", `{"` + secret + `":["` + secret + `", 2.50]}`, `{"[redacted]":["[redacted]",2.50]}`},
		{"not JSON", `Basic ` + basic, `"Basic [redacted]"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := redact.JSON([]byte(tt.in), scrub)
			require.Equal(t, tt.want, string(got))
			require.True(t, json.Valid(got))
		})
	}
}
