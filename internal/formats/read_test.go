package formats_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/elasticsearch"
	"github.com/syncer-dev/syncer/internal/formats/readback"
	"github.com/syncer-dev/syncer/internal/formats/syncer"
)

// A destination is read back through its verify block when it has one,
// else through its format's own read API, which the format registers
// beside its sender; a format without one is ErrNoReadAPI, a block that
// does not compile a *FieldError naming its field.
func TestRegistryReader(t *testing.T) {
	t.Parallel()
	a := &formats.Account{Source: "contacts"}
	for _, tt := range []struct {
		format string
		path   string
	}{
		{"", syncer.ReadBack.Path},
		{"syncer", "/v1/lookup"},
		{"elasticsearch", elasticsearch.ReadBack.Path},
	} {
		rd, err := formats.Reader(tt.format, nil, a)
		require.NoError(t, err, tt.format)
		require.IsType(t, &readback.IDsReader{}, rd, tt.format)
		require.Equal(t, tt.path, rd.(*readback.IDsReader).Path, tt.format)
	}
	for _, name := range []string{"custom", "standard-webhooks", "cloudevents", "nosuch"} {
		_, err := formats.Reader(name, nil, a)
		require.ErrorIs(t, err, formats.ErrNoReadAPI, name)
		require.EqualError(t, err, "format "+name+" has no read API: verify cannot read it back without a verify block")
	}

	block := &custom.VerifyConfig{Response: `[.body[] | {id, payload}]`}
	for _, name := range []string{"syncer", "cloudevents"} {
		rd, err := formats.Reader(name, block, &formats.Account{Source: "contacts", Tenant: "acme"})
		require.NoError(t, err, name)
		require.IsType(t, &custom.Reader{}, rd, "the block reads any format")
	}
	_, err := formats.Reader("syncer", &custom.VerifyConfig{}, a)
	var fe *formats.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "verify.response", fe.Field)
	require.ErrorContains(t, err, "verify.response: required")
}
