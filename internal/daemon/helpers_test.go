package daemon_test

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

// setupLookup is setup of a migrated schema whose fake also answers
// lookups, as verify needs; the fake is returned for drift and counts.
func setupLookup(t *testing.T) (*bundle, *fakethirdparty.Server) {
	t.Helper()
	pool := dbtest.NewPool(t)
	_, err := migrations.Up(t.Context(), pool, nil)
	require.NoError(t, err)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &bundle{pool: pool, fakeURL: srv.URL}, fake
}
