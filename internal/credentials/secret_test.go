package credentials

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Kubernetes Secret is a symlink to a directory that is swapped whole:
// the secret is read again once the swap is seen, and at once after
// Reload; a file emptied by a half-done write keeps the value before.
func TestSecretFollowsASymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(version, value string) {
		d := filepath.Join(dir, version)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "token"), []byte(value+"\n"), 0o600))
		tmp := filepath.Join(dir, "..data_tmp")
		require.NoError(t, os.Symlink(version, tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	}
	write("v1", "first")
	link := filepath.Join(dir, "token")
	require.NoError(t, os.Symlink(filepath.Join("..data", "token"), link))
	set := NewSet(nil)
	s, err := set.FromFile("destination d: token_file", link)
	require.NoError(t, err)
	require.Equal(t, "first", s.Value())
	require.Equal(t, "[redacted]", s.String())

	write("v2", "second")
	require.Equal(t, "first", s.Value(), "looked at once a second at most")
	set.Reload()
	require.Equal(t, "second", s.Value(), "SIGHUP reads it again at once")

	write("v3", "third")
	time.Sleep(CheckEveryDefault + 100*time.Millisecond)
	require.Equal(t, "third", s.Value(), "the swap is seen by itself")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "v3", "token"), nil, 0o600))
	set.Reload()
	require.Equal(t, "third", s.Value(), "an empty file keeps the value before")
}
