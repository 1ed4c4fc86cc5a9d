package thirdparty_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestSafeText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{"plain", `{"error":"bad \"field\""}`, nil, `{"error":"bad \"field\""}`},
		{"unicode kept", "zürich ✓ 東京 👩‍💻", nil, "zürich ✓ 東京 👩‍💻"},
		{"newlines", "a\nb\r\nc\td", nil, `a\nb\r\nc\td`},
		{"terminal escape", "\x1b[31mred\x1b[0m\x07", nil, `\x1b[31mred\x1b[0m\x07`},
		{"c1 csi", "a\u009b2Jb", nil, `a\x9b2Jb`},
		{"nul and del", "a\x00b\x7f", nil, `a\x00b\x7f`},
		{"line separator and bidi", "a\u2028b\u202ec\u2066", nil, `a\u2028b\u202ec\u2066`},
		{"invalid utf8", "a\xffb", nil, "a\uFFFDb"},
		{"secret", "token tok-1 and tok-1", []string{"tok-1"}, "token [redacted] and [redacted]"},
		{"escaped secret", "q=a%2Fb%3D and a%2Fb=", []string{"a/b="}, "q=[redacted] and [redacted]"},
		{"empty secret ignored", "abc", []string{""}, "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, thirdparty.SafeText(tt.in, tt.secrets...))
		})
	}
}

func TestSafeTextBounded(t *testing.T) {
	t.Parallel()
	exact := strings.Repeat("x", thirdparty.SafeTextMax)
	require.Equal(t, exact, thirdparty.SafeText(exact), "a text that fits is not cut")

	for _, in := range []string{
		strings.Repeat("x", 3<<20),
		strings.Repeat("\x1b", 5000), // escapes grow the text fourfold
		strings.Repeat("東", 5000),    // multi-byte runes are cut whole
		strings.Repeat("x", thirdparty.SafeTextMax+1),
	} {
		got := thirdparty.SafeText(in)
		require.LessOrEqual(t, len(got), thirdparty.SafeTextMax)
		require.True(t, strings.HasSuffix(got, "...[cut]"))
		require.True(t, utf8.ValidString(got))
	}
	// A secret across the cut is removed before cutting.
	in := strings.Repeat("x", thirdparty.SafeTextMax-4) + "secret-value" + strings.Repeat("y", 100)
	require.NotContains(t, thirdparty.SafeText(in, "secret-value"), "secr")
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"https://api.example.com/v1/batches", "https://api.example.com/v1/batches"},
		{"https://api.example.com/v1/batches?api_key=s3cret", "https://api.example.com/v1/batches?[redacted]"},
		{"https://user:pw@api.example.com:8443/x?", "https://api.example.com:8443/x?[redacted]"},
		{"https://api.example.com/x#token=abc", "https://api.example.com/x"},
		{"/relative/path?k=v", "/relative/path?[redacted]"},
		{"http://[::1", "[unparseable URL]"},
		{"mailto:someone@example.com", "mailto:[redacted]"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, thirdparty.RedactURL(tt.in))
		})
	}
}
