package credentials_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/syncer-dev/syncer/internal/credentials"
)

// A grant's token is fetched once and shared until it is about to expire
// or a 401 drops it; a failed fetch leaves none.
func TestTokenCache(t *testing.T) {
	t.Parallel()
	var c credentials.TokenCache
	fetches := 0
	next := []*oauth2.Token{{AccessToken: "a"}, {AccessToken: "b"}, {AccessToken: "c", Expiry: time.Now().Add(time.Second)}}
	fetch := func(context.Context) (*oauth2.Token, error) {
		tok := next[fetches]
		fetches++
		return tok, nil
	}
	for range 3 {
		h, err := c.Authorization(t.Context(), fetch)
		require.NoError(t, err)
		require.Equal(t, "Bearer a", h)
	}
	require.Equal(t, 1, fetches)
	require.Equal(t, "a", c.Token())

	c.Refresh("Bearer older")
	h, _ := c.Authorization(t.Context(), fetch)
	require.Equal(t, "Bearer a", h, "a 401 to an older token changes nothing")
	c.Refresh("Bearer a")
	h, _ = c.Authorization(t.Context(), fetch)
	require.Equal(t, "Bearer b", h)

	refused := errors.New("refused")
	c.Refresh("Bearer b")
	_, err := c.Authorization(t.Context(), func(context.Context) (*oauth2.Token, error) { return nil, refused })
	require.ErrorIs(t, err, refused)
	require.Empty(t, c.Token())

	// A token of a second's life is renewed within its last fifth.
	h, _ = c.Authorization(t.Context(), fetch)
	require.Equal(t, "Bearer c", h)
	require.Equal(t, 3, fetches)
}
