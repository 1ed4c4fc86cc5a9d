package cli

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReleaseExecutablePages: the executable's read-only pages leave the
// resident set, and the program runs on (its code comes back from the
// page cache as it runs). Not parallel: other tests would fault pages in
// while it reads the figure.
func TestReleaseExecutablePages(t *testing.T) {
	rssFile := func() int64 {
		t.Helper()
		f, err := os.Open("/proc/self/status")
		require.NoError(t, err)
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				require.NoError(t, err)
				return kb << 10
			}
		}
		t.Fatal("no RssFile in /proc/self/status")
		return 0
	}
	before := rssFile()
	released, err := releaseExecutablePages()
	require.NoError(t, err)
	require.Positive(t, released)
	after := rssFile()
	require.Less(t, after, before, "released %d bytes of mappings", released)
	// Still running, its code and constants mapped again as used.
	require.Equal(t, "12", strconv.Itoa(12))
	t.Logf("RssFile %d KiB -> %d KiB", before>>10, after>>10)
}
