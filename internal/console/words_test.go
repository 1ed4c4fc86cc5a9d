package console

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/status"
)

// The source page offers to retry every failed key only when there is
// one, and to try the held keys now when only those wait.
func TestSourcePageRetryAllOnlyWhenThereIsSomething(t *testing.T) {
	t.Parallel()
	p, err := parsePages()
	require.NoError(t, err)
	render := func(d sourceData) string {
		t.Helper()
		var b bytes.Buffer
		require.NoError(t, p.set["source"].ExecuteTemplate(&b, "layout", view{Title: "Source", Data: d}))
		return b.String()
	}
	src := sourceRow{Name: "orders", Table: "public.orders", Destination: "crm"}
	for _, tt := range []struct {
		name   string
		failed int64
		held   []status.HeldKey
		want   string
	}{
		{"nothing failed or held", 0, nil, ""},
		{"one failed", 1, nil, "Retry all failed keys of orders"},
		{"only held", 0, []status.HeldKey{{Source: "orders", ID: "7", State: "held"}}, "Try all held keys of orders now"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := src
			s.Failed = tt.failed
			page := render(sourceData{Source: s, Held: tt.held, Retryable: true})
			if tt.want == "" {
				require.NotContains(t, page, `id="retry-all"`)
				return
			}
			require.Contains(t, page, `id="retry-all">`+tt.want+`</button>`)
		})
	}
}

func TestCountIsSingularForOne(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0 failed keys", count(0, "failed key"))
	require.Equal(t, "1 failed key", count(1, "failed key"))
	require.Equal(t, "2 held keys", count(2, "held key"))
	require.Equal(t, "is", verb(1, "is", "are"))
	require.Equal(t, "are", verb(3, "is", "are"))
}
