package unchanged_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// Migration 028: a digest is a (tenant, key)'s. The body acme's account
// accepted is not globex's: the same key and body moved to globex is not
// skipped there; a drop at one tenant leaves the other's digest; a heal's
// ForgetKeys forgets the key at every tenant.
func TestDigestsPerTenantAndKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	d := unchanged.Digest("tag", feed.Item{ID: "7", Payload: json.RawMessage(`{"a":1}`)})
	settle := func(tenant string, keep map[string][]byte, drop []string) {
		t.Helper()
		b := &pgx.Batch{}
		unchanged.QueueSettled(b, "contacts", tenant, keep, nil, drop)
		require.NoError(t, pool.SendBatch(ctx, b).Close())
	}
	same := func(tenant string) bool {
		t.Helper()
		var kept []byte
		require.NoError(t, pool.QueryRow(ctx, `SELECT `+unchanged.KeptSQL("$1::text", "$2::text", "$3::text"), "contacts", tenant, "7").Scan(&kept))
		return bytes.Equal(kept, d)
	}
	settle("acme", map[string][]byte{"7": d}, nil)
	require.True(t, same("acme"))
	require.False(t, same("globex"), "moved to globex: globex's account does not have it")
	require.False(t, same(""), "nor does a feed without tenants")

	settle("globex", map[string][]byte{"7": d}, nil)
	settle("acme", nil, []string{"7"})
	require.False(t, same("acme"), "dropped at acme")
	require.True(t, same("globex"), "kept at globex")

	settle("acme", map[string][]byte{"7": d}, nil)
	require.NoError(t, unchanged.ForgetKeys(ctx, pool, "contacts", []string{"7"}))
	require.False(t, same("acme"))
	require.False(t, same("globex"))
}
