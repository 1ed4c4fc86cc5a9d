package fakethirdparty_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// TestAcceptsGoldenBodies: every golden request body (testdata/README.md)
// is one the fake accepts whole, so the fake is no stricter than the
// contract where payloads are unusual.
func TestAcceptsGoldenBodies(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("../../../testdata/batches/*.body.json")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	b := setup(t, fakethirdparty.Config{}, nil)
	for _, p := range paths {
		body, err := os.ReadFile(p)
		require.NoError(t, err)
		code, _, answer := b.post(t, http.MethodPost, "/v1/batches",
			map[string]string{"Content-Type": "application/json", "Idempotency-Key": p}, string(body))
		require.Equal(t, http.StatusOK, code, "%s: %s", p, answer)
		require.JSONEq(t, `{"results":[]}`, answer)
	}
	st := b.fake.Stats()
	require.Equal(t, st.ItemsReceived, st.ItemsAccepted)
	require.Equal(t, int64(2), st.Tombstones)
}
