package soak

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A key that comes with a second body is reported with both, item by
// item and whole, so its cause can be found without the daemons' timing.
func TestKeyConflictNamesBothBodies(t *testing.T) {
	t.Parallel()
	a := newAPI(1, "")
	t.Cleanup(a.close)
	start := time.Now()
	first := []byte(`{"items":[{"id":"7","version":2,"payload":{"n":1}}]}`)
	second := []byte(`{"items":[{"id":"7","version":2,"payload":{"n":2}},{"id":"8","version":1,"deleted":true}]}`)
	a.record("syncer-abc", "/v1/batches", first, start.Add(time.Second))
	a.record("syncer-abc", "/v1/batches", first, start.Add(2*time.Second))
	require.Empty(t, a.conflicts(), "the same body again is a retry")
	a.record("syncer-abc", "/v1/batches", second, start.Add(3*time.Second))
	c := a.conflicts()
	require.Len(t, c, 1)
	require.Equal(t, sha256.Sum256(first), c[0].first.sum)

	dir := t.TempDir()
	got := c[0].describe("", start, dir, 1)
	require.Contains(t, got, `Idempotency-Key "syncer-abc" came with a second body`)
	require.Contains(t, got, "body 1 at 1s, /v1/batches, 52 bytes, items [7@2]")
	require.Contains(t, got, "body 2 at 3s, /v1/batches, 90 bytes, items [7@2 8@1(deleted)]")
	require.Contains(t, got, string(first))
	require.Contains(t, got, string(second))
	for i, want := range [][]byte{first, second} {
		b, err := os.ReadFile(filepath.Join(dir, "key-conflict-1-body-"+string(rune('1'+i))))
		require.NoError(t, err)
		require.Equal(t, want, b)
	}
}
