package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A sign-in sends the browser on only to a page of the console: never to
// another host, whatever the form's next says.
func TestLocalPath(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/console/sources/orders":     "/console/sources/orders",
		"/console":                    "/console",
		"":                            "/console",
		"https://evil.example/":       "/console",
		"//evil.example/console":      "/console",
		"/consolex/../../evil":        "/console",
		"/console/../evil":            "/console",
		"/console/replay?from=1":      "/console/replay?from=1",
		"/console\\@evil.example":     "/console",
		"/console/\r\nSet-Cookie: x=": "/console",
	} {
		require.Equal(t, want, localPath(next), next)
	}
}

// The token is compared whatever the lengths, and only equal text passes.
func TestSameSecret(t *testing.T) {
	t.Parallel()
	require.True(t, sameSecret("abc", "abc"))
	require.False(t, sameSecret("abc", "abd"))
	require.False(t, sameSecret("ab", "abc"))
	require.False(t, sameSecret("", "abc"))
}
