package tenant_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/tenant"
)

// The stored forms are the ones syncer wrote before they moved here: a
// change to one loses data already in tables (docs/design.md, "A tenant is
// a type").
func TestStoredFormsAreKept(t *testing.T) {
	acme := tenant.Tenant("acme")
	require.Equal(t, "destination:crm/tenant:acme", tenant.Namespace("crm", acme))
	require.Equal(t, "destination:crm/tenant:", tenant.NamespacePrefix("crm"))
	require.Equal(t, "contacts\x1ftenant\x1facme", tenant.RunKey("contacts", acme))
	require.Equal(t, "contacts", tenant.RunKey("contacts", ""))
	require.Equal(t, "source:contacts@2/tenant=acme", tenant.Salt("source:contacts@2", acme))
}

func TestEachFormReadsBack(t *testing.T) {
	for _, v := range []tenant.Tenant{"acme", "a/tenant=b", "x\x1fy", "ü:1"} {
		src, got, ok := tenant.SplitRunKey(tenant.RunKey("contacts", v))
		require.True(t, ok)
		require.Equal(t, "contacts", src)
		require.Equal(t, v, got)

		salt := tenant.Salt("source:contacts@2", v)
		got, ok = tenant.OfSalt(salt)
		require.True(t, ok)
		require.Equal(t, v, got, "a value holding the separator reads back whole")
		require.Equal(t, "source:contacts@2", tenant.CheckpointOfSalt(salt, v))
	}
	_, _, ok := tenant.SplitRunKey("contacts")
	require.False(t, ok)
	_, ok = tenant.OfSalt("live")
	require.False(t, ok)
}
