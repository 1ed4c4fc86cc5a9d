package credentials_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/syncer-dev/syncer/internal/credentials"
)

// TokenFresh is the one renewal rule of both OAuth2 caches: renewed a
// fifth of its life before expiry, at most 10 s before.
func TestTokenFresh(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		tok  *oauth2.Token
		at   time.Duration
		want bool
	}{
		{"none", nil, 0, false},
		{"no expiry", &oauth2.Token{AccessToken: "a"}, 100 * time.Hour, true},
		{"an hour, 49 s before its end", &oauth2.Token{AccessToken: "a", Expiry: t0.Add(time.Hour)}, time.Hour - 49*time.Second, true},
		{"an hour, 9 s before its end", &oauth2.Token{AccessToken: "a", Expiry: t0.Add(time.Hour)}, time.Hour - 9*time.Second, false},
		{"a second, at 0.7 s", &oauth2.Token{AccessToken: "a", Expiry: t0.Add(time.Second)}, 700 * time.Millisecond, true},
		{"a second, at 0.9 s", &oauth2.Token{AccessToken: "a", Expiry: t0.Add(time.Second)}, 900 * time.Millisecond, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, credentials.TokenFresh(tt.tok, t0, t0.Add(tt.at)))
		})
	}
}
