package formats_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/formatstest"
)

// The table is read by everyone; a test's registration adds to a copy,
// never to the product's table.
func TestRegistryWith(t *testing.T) {
	t.Parallel()
	reg := formats.Default().With(formatstest.Kind)
	_, ok := reg.Lookup(formatstest.Name)
	require.True(t, ok)
	require.False(t, formats.Known(formatstest.Name), "the default table is unchanged")
	require.Equal(t, []string{"syncer", "standard-webhooks", "cloudevents", "elasticsearch", "custom"}, formats.Names(false))
	require.Equal(t, []string{"syncer", "standard-webhooks", "cloudevents", "elasticsearch"}, formats.Names(true))
	def, ok := formats.Lookup("")
	require.True(t, ok)
	require.Equal(t, "syncer", def.Name, "the default first")

	// A format built with no settings gets its defaults, as a destination
	// that gives none of its fields.
	f, err := formats.New(&formats.Spec{Name: formatstest.Name, Settings: formatstest.Settings{Greeting: "hi"}}, "")
	require.NoError(t, err)
	require.NotNil(t, f)
	_, err = formats.New(&formats.Spec{Name: "nosuch"}, "")
	require.EqualError(t, err, `format: unknown format "nosuch" (known: syncer, standard-webhooks, cloudevents, elasticsearch, custom)`)
}
