package redact_test

import (
	"testing"

	"github.com/syncer-dev/syncer/internal/redact"
)

// BenchmarkBasic is the cost of a Basic header's texts, paid by an
// OAuth2 or basic-auth client at each answer.
func BenchmarkBasic(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = redact.Basic("app-client-0123", "app/Sec+ret=2&x-0123456789abcdef")
	}
}

// BenchmarkForms is the cost of expanding an OAuth2 client's secrets, paid
// once per answer that has a text to make safe.
func BenchmarkForms(b *testing.B) {
	b.ReportAllocs()
	s := append([]string{"app/Sec+ret=2&x-0123456789abcdef", "tok-0123456789"}, redact.Basic("app-client-0123", "app/Sec+ret=2&x-0123456789abcdef")...)
	for b.Loop() {
		_ = redact.Forms(s...)
	}
}
